"""Splits (salted group hash), the frozen release tokenizer and the content-addressed token views of a release."""
