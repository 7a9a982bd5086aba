"""Target devices reached over TVM's RPC: the tracker and servers, which server a granted device is, the runner that measures candidates there."""
