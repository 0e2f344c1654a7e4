/**
 * What an agent inside a sandbox does with the network, as one Python script (debian-base has
 * python3): each operation prints one JSON line. It reads the proxy from HTTP_PROXY as real tools
 * do, and speaks CONNECT by hand where a test needs to forge or flood.
 */
export const EGRESS_CLIENT = String.raw`
import base64, json, os, socket, sys, time, urllib.parse, urllib.request
op = json.loads(sys.argv[1])
proxy = urllib.parse.urlsplit(op.get("proxy") or os.environ.get("HTTP_PROXY", "http://none:none@127.0.0.1:1"))

def credential(user=None, secret=None):
    user = user if user is not None else urllib.parse.unquote(proxy.username or "")
    secret = secret if secret is not None else (proxy.password or "")
    return "Basic " + base64.b64encode((user + ":" + secret).encode()).decode()

def tunnel(target, user=None, secret=None, auth=True, timeout=10):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=timeout)
    header = ("Proxy-Authorization: " + credential(user, secret) + "\r\n") if auth else ""
    s.sendall(("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n" + header + "\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(1)
        if not chunk:
            break
        answer += chunk
    line = answer.split(b"\r\n")[0].decode()
    return s, int(line.split(" ")[1]) if line.startswith("HTTP/") else 0

def read_all(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data

kind = op["op"]
if kind == "env":
    print(json.dumps({k: os.environ.get(k) for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY"]}))
elif kind == "urllib":
    try:
        with urllib.request.urlopen(op["url"], timeout=10) as response:
            print(json.dumps({"status": response.status, "body": response.read().decode()}))
    except urllib.error.HTTPError as error:
        print(json.dumps({"status": error.code, "body": error.read().decode()}))
    except Exception as error:
        print(json.dumps({"status": 0, "error": repr(error)}))
elif kind == "get":
    # GET http://host/ through the proxy by hand (absolute URI), optionally with a forged credential.
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    header = ("Proxy-Authorization: " + credential(op.get("user"), op.get("secret")) + "\r\n") if op.get("auth", True) else ""
    s.sendall(("GET " + op["url"] + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + header + "\r\n").encode())
    data = read_all(s)
    print(json.dumps({"status": int(data.split(b" ")[1]) if data.startswith(b"HTTP/") else 0, "body": data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")}))
elif kind == "connect":
    try:
        s, status = tunnel(op["target"], op.get("user"), op.get("secret"), op.get("auth", True))
    except OSError as error:
        print(json.dumps({"status": 0, "error": repr(error)}))
        sys.exit(0)
    body = ""
    if status == 200:
        s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        body = read_all(s).split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    print(json.dumps({"status": status, "body": body}))
elif kind == "hold":
    # Opens a tunnel, says so on stderr, and reports when the proxy ends it.
    s, status = tunnel(op["target"], timeout=op["seconds"])
    sys.stderr.write("open %d\n" % status); sys.stderr.flush()
    with open("/tmp/hold-status", "w") as marker:
        marker.write(str(status))
    started = time.time()
    s.settimeout(op["seconds"])
    try:
        closed = s.recv(1) == b""
    except socket.timeout:
        closed = False
    except OSError:
        closed = True
    print(json.dumps({"status": status, "closed": closed, "afterSeconds": round(time.time() - started, 1)}))
elif kind == "flood":
    held, statuses = [], {}
    for _ in range(op["count"]):
        try:
            s, status = tunnel(op["target"], timeout=5)
        except OSError:
            status = 0
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status == 200:
            held.append(s)
    print(json.dumps(statuses))
elif kind == "slow":
    # Asks for an endless stream and reads none of it.
    s, status = tunnel(op["target"])
    s.sendall(b"GO")
    time.sleep(op["seconds"])
    print(json.dumps({"status": status}))
elif kind == "dns":
    try:
        print(json.dumps({"resolved": socket.getaddrinfo(op["host"], 80)[0][4][0]}))
    except OSError as error:
        print(json.dumps({"error": repr(error)}))
elif kind == "direct":
    try:
        socket.create_connection((op["host"], op["port"]), timeout=3).close()
        print(json.dumps({"connected": True}))
    except OSError as error:
        print(json.dumps({"connected": False, "error": repr(error)}))
`;
