"""`draquota dashboard`: a read-only page of queues, quota, lending and waiting workloads.

`model` turns cluster objects into the page model (pure), `page` renders it as HTML
(pure), `sources` reads the cluster (informers with cluster-wide read access, else
LISTs of one namespace), `server` serves the page on loopback.
"""
