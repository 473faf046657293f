"""The cluster store and its views: what the shell keeps of the cluster, and where it comes from."""
