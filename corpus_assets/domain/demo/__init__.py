"""What `corpus demo` feeds the pipeline: the deterministic demo dumps and the local pydoc documentation site."""
