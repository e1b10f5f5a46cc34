"""The wire protocol: msgpack headers plus raw array frames over ZMQ (see codec.py and channels.py)."""
