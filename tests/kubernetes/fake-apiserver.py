#!/usr/bin/env python3
"""A fake Kubernetes API server for sbx's tests (Python standard library only, python3 >= 3.9).

Serves discovery, CRUD, watch, pods/exec, pods/portforward and pods/log for core v1 pods,
persistentvolumeclaims, services, events and namespaces, and (unless --no-crds) agent-sandbox's
v1beta1 Sandbox, SandboxTemplate, SandboxWarmPool and SandboxClaim, with a small emulation of
agent-sandbox's controllers. Pods run as containers of the dockerd at --docker-host.
See README.md next to this file.
"""
import argparse
import os
import signal
import sys
import threading

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from k8sfake import util  # noqa: E402
from k8sfake.api import API  # noqa: E402
from k8sfake.controller import Controllers  # noqa: E402
from k8sfake.docker import Docker  # noqa: E402
from k8sfake.httpd import Auth, Server, tls_context  # noqa: E402
from k8sfake.kubelet import Kubelet  # noqa: E402
from k8sfake.resources import core_types, crd_type  # noqa: E402
from k8sfake.schema import load_crds  # noqa: E402
from k8sfake.store import Store  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description="fake Kubernetes API server for sbx's tests")
    ap.add_argument("--listen", default="127.0.0.1:0", help="ADDR:PORT (port 0 picks a free one)")
    ap.add_argument("--tls-cert", help="server certificate (PEM); without it the server speaks plain HTTP")
    ap.add_argument("--tls-key", help="server key (PEM)")
    ap.add_argument("--client-ca", help="CA whose client certificates authenticate users (CN = user, O = groups)")
    ap.add_argument("--tokens", help="JSON file of bearer tokens and their rules (see k8sfake/httpd.py)")
    ap.add_argument("--docker-host", help="unix socket of the dockerd that runs the pods")
    ap.add_argument("--kubelet", choices=["docker", "none"], default="docker",
                    help="'none': pods only pretend to run (no containers, exec refused)")
    ap.add_argument("--host-image", action="append", default=[], metavar="IMAGE",
                    help="pods of this image run their command on this machine, in namespaces the fake makes "
                         "(k8sfake/hostpods.py); repeatable")
    ap.add_argument("--instance", default="k8sfake", help="label value marking this fake's containers and volumes")
    ap.add_argument("--no-crds", action="store_true", help="serve no agent-sandbox groups (a cluster without the CRDs)")
    ap.add_argument("--no-controllers", action="store_true", help="no agent-sandbox emulation (objects stay as written)")
    ap.add_argument("--history", type=int, default=10000, help="watch events kept per resource type")
    ap.add_argument("--bookmark-interval", type=float, default=30.0, help="seconds between watch bookmarks")
    ap.add_argument("--grace-cap", type=int, help="cap on pod termination grace periods, in seconds")
    ap.add_argument("--ready-file", help="written with the server URL once it listens")
    ap.add_argument("--log", help="log file (default: standard error)")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    return ap.parse_args()


def main():
    a = parse_args()
    util.set_log(open(a.log, "a") if a.log else sys.stderr)
    types = core_types()
    if not a.no_crds:
        types += [crd_type(c) for c in load_crds().values()]
    store = Store(types, a.history)
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        store.create(store.type_of("namespaces", ""), "", {"metadata": {"name": ns}})
    docker = None
    if a.kubelet == "docker":
        if not a.docker_host:
            sys.exit("fake-apiserver: --docker-host is required with --kubelet=docker")
        docker = Docker(a.docker_host)
        if not docker.ping():
            sys.exit("fake-apiserver: no dockerd answers on '%s'" % a.docker_host)
    kubelet = Kubelet(store, store.types, docker, a.instance, a.grace_cap, host_images=a.host_image)
    controllers = Controllers(store, store.types, crds_enabled=not a.no_crds, agent_sandbox=not a.no_controllers)
    host, _, port = a.listen.rpartition(":")
    host = host.strip("[]")
    tls = tls_context(a.tls_cert, a.tls_key, a.client_ca) if a.tls_cert else None
    api = API(store, types, kubelet if docker is not None else None, verbose=a.verbose,
              bookmark_interval=a.bookmark_interval)
    server = Server((host, int(port)), api, Auth(a.tokens), tls)
    real_port = server.server_address[1]
    url = "%s://%s:%d" % ("https" if tls else "http", host if ":" not in host else "[%s]" % host, real_port)
    api.server_address = "%s:%d" % (host, real_port)
    kubelet.start()
    controllers.start()

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(url + "\n")
        os.rename(tmp, a.ready_file)
    util.log("fake API server listening on %s (pid %d)", url, os.getpid())
    server.serve_forever(poll_interval=0.5)
    kubelet.stop()
    controllers.stop()
    server.server_close()
    util.log("fake API server stopped")


if __name__ == "__main__":
    main()
