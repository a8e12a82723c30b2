"""Pure pgoutput decoding: bytes in, frozen dataclasses out. No I/O, no state beyond a stream flag."""
