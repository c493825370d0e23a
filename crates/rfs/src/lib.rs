//! osprobe-rfs: the remote file service (seed 000 sections 5, 6 and 10):
//! a server exporting one directory and a client that keeps a window of
//! requests in flight.
