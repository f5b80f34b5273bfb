"""strongSwan's Python `vici` package (from PyPI) against a VICI socket.

    python client.py SOCKET CONNECTION CHILD

Prints one JSON object: the version answer, the control-log messages
streamed while initiating CHILD of CONNECTION, the list-sa and list-conn
events, and the events a second session registered for (ike-updown,
child-updown, ike-rekey, child-rekey, log) while the first one initiated,
rekeyed the Child SA and the IKE SA, and terminated the IKE SA; values
decoded from bytes. A failed command raises, so the exit status is not 0.
"""

import json
import socket
import sys
import threading
import time

import vici

EVENTS = ["ike-updown", "child-updown", "ike-rekey", "child-rekey", "log"]


def decode(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, dict):
        return {k: decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


def session(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    return vici.Session(sock)


def follow(path, seen, ready, stop):
    """Collects the events of EVENTS into `seen` until `stop` is set."""
    for kind, msg in session(path).listen(EVENTS, timeout=0.2):
        if kind is None:
            ready.set()
        else:
            seen.append((kind.decode(), decode(msg)))
        if stop.is_set():
            break


def wait_for(seen, kind, secs=20):
    deadline = time.time() + secs
    while time.time() < deadline:
        if any(k == kind for k, _ in seen):
            return
        time.sleep(0.1)


def main():
    path, conn, child = sys.argv[1:4]
    seen, ready, stop = [], threading.Event(), threading.Event()
    listener = threading.Thread(target=follow, args=(path, seen, ready, stop))
    listener.start()
    ready.wait(10)
    s = session(path)
    out = {"version": decode(s.version())}
    logs = s.initiate({"ike": conn, "child": child, "timeout": "20000", "loglevel": "1"})
    out["initiate"] = [decode(line).get("msg", "") for line in logs]
    out["sas"] = decode(list(s.list_sas()))
    out["conns"] = decode(list(s.list_conns()))
    wait_for(seen, "child-updown")
    s.rekey({"child": child})
    wait_for(seen, "child-rekey")
    s.rekey({"ike": conn})
    wait_for(seen, "ike-rekey")
    list(s.terminate({"ike": conn, "timeout": "10000"}))
    deadline = time.time() + 10
    while time.time() < deadline and sum(1 for k, m in seen if k == "ike-updown" and "up" not in m) == 0:
        time.sleep(0.1)
    stop.set()
    listener.join(5)
    out["events"] = [{"kind": k, "msg": m} for k, m in seen]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
