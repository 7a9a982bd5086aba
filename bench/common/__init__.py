"""What the benchmarks share: the models they time, the peers' runners, rounds labelled by
the host's state, probes of the host, saved tuned runs and a service to load. Each module
imports TVM, TensorFlow and the peers inside its functions, so a script's ``--help`` stays
cheap."""
