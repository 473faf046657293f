"""The HTTP edge: AdmissionReviews in and out, TLS, forwarding, fair queuing, metrics."""
