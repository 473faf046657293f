"""draquota's imperative shell: the admission service, cluster cache, and command line."""
