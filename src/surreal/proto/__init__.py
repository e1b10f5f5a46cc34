"""The wire protocol: msgpack headers plus raw array frames over ZMQ (see codec.py and channels.py)."""

from surreal.proto.codec import PROTOCOL_VERSION, Limits, Message, ProtocolError, decode, encode

__all__ = ["PROTOCOL_VERSION", "Limits", "Message", "ProtocolError", "decode", "encode"]
