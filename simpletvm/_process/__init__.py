"""Process plumbing private to SimpleTVM: Ctrl-C inside TVM's callbacks, native output to the run's log, scratch directories, children that die with their parent."""
