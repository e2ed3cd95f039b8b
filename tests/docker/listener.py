"""A TCP listener on 127.0.0.1 for the Docker tests, started outside stockade.

Usage: python3 -I listener.py PORTFILE LOGFILE
Binds an ephemeral port, writes it to PORTFILE, then appends one line to
LOGFILE per accepted connection (so the test can assert that a blocked
connect really never arrived), then sends the client one byte: a client that
waits for it knows the line is written before it reports the connect.
"""

import os
import socket
import sys

port_file, log_file = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
s.listen(8)
tmp = port_file + ".tmp"
with open(tmp, "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(tmp, port_file)
while True:
    c, peer = s.accept()
    with open(log_file, "a") as f:
        f.write(f"accepted {peer[0]}:{peer[1]}\n")
    try:
        c.sendall(b"1")
    except OSError:
        pass
    c.close()
