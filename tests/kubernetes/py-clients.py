#!/usr/bin/python3
"""python-kubernetes (Debian's python3-kubernetes) against the fake API server: one check per
invocation, for 0001-fake-clients.sh. Prints what it saw; exit status 0 when the check holds.

usage: py-clients.py KUBECONFIG CONTEXT CHECK [ARGS...]   (namespace: $KUBE_NAMESPACE or default)
  watch                  watch sandboxes: ADDED, MODIFIED, DELETED of one it creates
  expired                pods: a watch from a compacted resourceVersion ends in 410; relist and rewatch
  window N               watch from a resourceVersion older than the last N events: 410 (no compaction)
  exec POD               stream exec: stdout, stderr and exit code; stdin
  portforward POD PORT   kubernetes.stream.portforward to an HTTP server in the pod
"""
import os
import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream

G, V = "agents.x-k8s.io", "v1beta1"
NS = os.environ.get("KUBE_NAMESPACE") or "default"


def sandbox(name):
    return {"apiVersion": G + "/" + V, "kind": "Sandbox", "metadata": {"name": name},
            "spec": {"podTemplate": {"spec": {"containers": [{
                "name": "main", "image": "sbx-test:1",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}}}}


def check_watch(api):
    co = client.CustomObjectsApi(api)
    rv = co.list_namespaced_custom_object(G, V, NS, "sandboxes")["metadata"]["resourceVersion"]
    name = "py-watch"

    def writer():
        time.sleep(0.5)
        co.create_namespaced_custom_object(G, V, NS, "sandboxes", sandbox(name))
        co.patch_namespaced_custom_object(G, V, NS, "sandboxes", name, {"metadata": {"labels": {"touched": "yes"}}})
        co.delete_namespaced_custom_object(G, V, NS, "sandboxes", name)

    t = threading.Thread(target=writer)
    t.start()
    seen = []
    w = watch.Watch()
    for ev in w.stream(co.list_namespaced_custom_object, G, V, NS, "sandboxes", resource_version=rv,
                       field_selector="metadata.name=" + name, timeout_seconds=60):
        seen.append(ev["type"])
        if ev["type"] == "MODIFIED" and (ev["object"]["metadata"].get("labels") or {}).get("touched") == "yes":
            seen.append("labelled")
        if ev["type"] == "DELETED":
            w.stop()
    t.join()
    print("events:", " ".join(seen))
    ok = seen[:1] == ["ADDED"] and seen[-1:] == ["DELETED"] and "labelled" in seen
    return ok


def check_expired(api):
    """A watch from a resourceVersion the server compacted away: python-kubernetes retries once
    on the ERROR 410 event, then raises ApiException(410); a fresh list gives a usable one."""
    core = client.CoreV1Api(api)
    old = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "py-old"},
                                    "spec": {"containers": [{"name": "c", "image": "sbx-test:1"}]}})
    core.delete_namespaced_pod("py-old", NS, grace_period_seconds=0)
    api.call_api("/fake/compact", "POST", auth_settings=["BearerToken"], response_type="object")
    w = watch.Watch()
    got = None
    try:
        for ev in w.stream(core.list_namespaced_pod, NS, resource_version=old):
            print("unexpected event", ev["type"])
            w.stop()
    except ApiException as e:
        got = e
    if got is None or got.status != 410:
        print("no 410 for a watch from", old, got)
        return False
    print("410:", got.reason)
    fresh = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "py-new"},
                                    "spec": {"containers": [{"name": "c", "image": "sbx-test:1"}]}})
    seen = [ev["type"] for ev in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=fresh,
                                                       timeout_seconds=2)]
    core.delete_namespaced_pod("py-new", NS, grace_period_seconds=0)
    print("relisted at", fresh, "and watched again:", " ".join(seen))
    return "too old resource version" in (got.reason or "") and seen[:1] == ["ADDED"]


def check_window(api, n):
    """Against a fake started with --history N: a resourceVersion older than the window is gone."""
    core = client.CoreV1Api(api)
    start = core.list_namespaced_pod(NS).metadata.resource_version
    for i in range(n + 2):
        core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w%d" % i},
                                        "spec": {"containers": [{"name": "c", "image": "sbx-test:1"}]}})
    try:
        for ev in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=start, timeout_seconds=5):
            print("unexpected event", ev["type"])
        print("no 410")
        return False
    except ApiException as e:
        print("410:", e.reason)
        if e.status != 410:
            return False
    recent = core.list_namespaced_pod(NS).metadata.resource_version
    core.delete_namespaced_pod("w0", NS, grace_period_seconds=0)
    seen = [ev["type"] for ev in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=recent,
                                                       timeout_seconds=2)]
    print("within the window:", " ".join(seen))
    return "DELETED" in seen


def check_exec(api, pod):
    core = client.CoreV1Api(api)
    resp = stream(core.connect_get_namespaced_pod_exec, pod, NS,
                  command=["sh", "-c", "echo to-out; echo to-err >&2; exit 5"],
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    resp.run_forever(timeout=30)
    out, err, code = resp.read_stdout(), resp.read_stderr(), resp.returncode
    print("stdout=%r stderr=%r code=%r" % (out, err, code))
    ok = out == "to-out\n" and err == "to-err\n" and code == 5
    resp = stream(core.connect_get_namespaced_pod_exec, pod, NS, command=["sh", "-c", "read l; echo got:$l"],
                  stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    resp.write_stdin("line1\n")
    resp.run_forever(timeout=30)
    out2 = resp.read_stdout()
    print("stdin echo=%r code=%r" % (out2, resp.returncode))
    plain = stream(core.connect_get_namespaced_pod_exec, pod, NS, command=["echo", "preloaded"],
                   stderr=True, stdin=False, stdout=True, tty=False)
    print("preloaded=%r" % plain)
    return ok and out2 == "got:line1\n" and resp.returncode == 0 and plain == "preloaded\n"


def check_portforward(api, pod, port):
    core = client.CoreV1Api(api)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, NS, ports=str(port))
    s = pf.socket(port)
    s.setblocking(True)
    s.sendall(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    s.settimeout(30)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    print("response:", data.split(b"\r\n")[0].decode(), "| body:", data.split(b"\r\n\r\n", 1)[-1].decode().strip())
    return data.startswith(b"HTTP/1.0 200") and data.rstrip().endswith(b"served") and pf.error(port) is None


def main():
    kubeconfig, context, what = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    api = client.ApiClient(cfg)
    if what == "watch":
        ok = check_watch(api)
    elif what == "expired":
        ok = check_expired(api)
    elif what == "window":
        ok = check_window(api, int(sys.argv[4]))
    elif what == "exec":
        ok = check_exec(api, sys.argv[4])
    elif what == "portforward":
        ok = check_portforward(api, sys.argv[4], int(sys.argv[5]))
    else:
        print("unknown check", what)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
