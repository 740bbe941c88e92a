"""Emulated RDMA NICs that send and receive RoCEv2 collectives (API documented as it lands)."""
