"""HTTP/1.1 on h11: the connection and its phases, the channel, request targets, and the types the wire and the application speak."""
