"""Pure domain logic of corpus.

Nothing in this package imports Dagster: a user can import any module here in a notebook,
and the tests check that (tests/test_domain_purity.py).
"""
