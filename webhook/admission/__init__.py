"""The admission use case: one request in, one outcome out, and what it stamps and remembers."""
