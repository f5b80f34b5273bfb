"""strongSwan's Python `vici` package (from PyPI) against a VICI socket.

    python client.py SOCKET CONNECTION CHILD

Prints one JSON object: the version answer, the control-log messages
streamed while initiating CHILD of CONNECTION, then the list-sa and
list-conn events, values decoded from bytes. A failed command raises, so
the exit status is not 0.
"""

import json
import socket
import sys

import vici


def decode(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, dict):
        return {k: decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


def main():
    path, conn, child = sys.argv[1:4]
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    session = vici.Session(sock)
    out = {"version": decode(session.version())}
    logs = session.initiate({"ike": conn, "child": child, "timeout": "20000", "loglevel": "1"})
    out["initiate"] = [decode(line).get("msg", "") for line in logs]
    out["sas"] = decode(list(session.list_sas()))
    out["conns"] = decode(list(session.list_conns()))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
