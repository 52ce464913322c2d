"""Host pods: pods whose first container's image is one of --host-image run their command on
this machine instead of in the dockerd, each in namespaces the fake makes for it: a network
namespace (loopback only, up; port-forward connects inside it as for a container), a private
mount namespace (the pod's Secret volumes and emptyDirs bind-mounted at their mountPaths) and a
PID namespace (killing its first process ends everything the pod started). The image is never
looked at: it is a name that says "run on the host". This is how sbx's tests run sbx-node as a
pod's command for real (its sandboxes need the host's namespaces and cgroups)."""
import base64
import os
import shutil
import signal
import subprocess
import tempfile
import threading

from .docker import connect_in_netns
from .util import bad_request, log, now_rfc3339

# Run inside the new namespaces: loopback up, each "SRC=DST" pair bind-mounted, then the pod's
# command (exec: it becomes the PID namespace's first process after unshare's fork).
_SETUP = ('set -e; ip link set lo up; for m in $SBX_FAKE_MOUNTS; do '
          'mount --bind "${m%%=*}" "${m#*=}"; done; unset SBX_FAKE_MOUNTS; exec "$@"')


class HostPod:
    def __init__(self, proc, workdir, made_dirs, log_path):
        self.proc = proc
        self.workdir = workdir
        self.made_dirs = made_dirs
        self.log_path = log_path
        self.started = now_rfc3339()


class HostPods:
    def __init__(self, store, types, images):
        self.store = store
        self.secrets = types["secrets."]
        self.images = set(images)
        self.lock = threading.Lock()
        self.pods = {}  # pod uid -> HostPod

    def handles(self, pod):
        c = (pod["spec"].get("containers") or [{}])[0]
        return c.get("image") in self.images

    def get(self, uid):
        with self.lock:
            return self.pods.get(uid)

    def _mounts(self, pod, c, workdir):
        """(src, dst) pairs for the container's volume mounts; raises ValueError naming what is
        missing (a Secret, a key)."""
        ns = pod["metadata"]["namespace"]
        srcs = {}
        for v in pod["spec"].get("volumes") or []:
            d = os.path.join(workdir, "vol-" + v["name"])
            if v.get("secret") is not None:
                name = v["secret"].get("secretName", "")
                sec = self.store.find(self.secrets, ns, name)
                if sec is None:
                    raise ValueError('secret "%s" not found' % name)
                os.makedirs(d, mode=0o700)
                mode = v["secret"].get("defaultMode", 0o644)
                for k, val in (sec.get("data") or {}).items():
                    p = os.path.join(d, k)
                    with open(p, "wb") as f:
                        f.write(base64.b64decode(val))
                    os.chmod(p, mode)
                srcs[v["name"]] = d
            elif "emptyDir" in v:
                os.makedirs(d, mode=0o755)
                srcs[v["name"]] = d
        pairs = []
        for vm in c.get("volumeMounts") or []:
            if vm.get("name") in srcs:
                pairs.append((srcs[vm["name"]], vm["mountPath"]))
        return pairs

    def start(self, pod, env):
        """Start the pod's command; raises ValueError with the reason it cannot."""
        md = pod["metadata"]
        c = pod["spec"]["containers"][0]
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        if not argv:
            raise ValueError("a host pod needs a command (its image has no entrypoint here)")
        workdir = tempfile.mkdtemp(prefix="k8sfake-hostpod-")
        made = []
        try:
            pairs = self._mounts(pod, c, workdir)
            for _, dst in pairs:
                if " " in dst or "=" in dst or not dst.startswith("/"):
                    raise ValueError("mountPath %r cannot be used by a host pod" % dst)
                if not os.path.isdir(dst):
                    # The mount point is made on the host (empty; the bind mount is private to
                    # the pod) and removed when the pod ends.
                    parts = dst.strip("/").split("/")
                    for i in range(len(parts)):
                        p = "/" + "/".join(parts[:i + 1])
                        if not os.path.isdir(p):
                            os.mkdir(p, 0o755)
                            made.append(p)
        except (ValueError, OSError) as e:
            for p in reversed(made):
                _rmdir(p)
            shutil.rmtree(workdir, ignore_errors=True)
            raise ValueError(str(e))
        penv = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "SBX_FAKE_MOUNTS": " ".join("%s=%s" % p for p in pairs)}
        for e in env:
            k, _, v = e.partition("=")
            penv[k] = v
        log_path = os.path.join(workdir, "log")
        out = open(log_path, "ab")
        try:
            proc = subprocess.Popen(
                ["unshare", "--net", "--mount", "--propagation", "private", "--pid", "--fork",
                 "--kill-child", "--mount-proc", "--", "/bin/sh", "-c", _SETUP, "sh"] + argv,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=penv,
                cwd=c.get("workingDir") or "/", start_new_session=True)
        finally:
            out.close()
        with self.lock:
            self.pods[md["uid"]] = HostPod(proc, workdir, made, log_path)
        log("kubelet: host pod %s/%s started (pid %d)", md["namespace"], md["name"], proc.pid)

    def stop(self, uid):
        with self.lock:
            hp = self.pods.pop(uid, None)
        if hp is None:
            return
        if hp.proc.poll() is None:
            # unshare dies by SIGKILL, so its child (the PID namespace's first process) gets
            # SIGKILL (--kill-child) and the kernel kills the rest of the namespace.
            hp.proc.send_signal(signal.SIGKILL)
        try:
            hp.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log("kubelet: host pod pid %d did not end", hp.proc.pid)
        for p in reversed(hp.made_dirs):
            _rmdir(p)
        shutil.rmtree(hp.workdir, ignore_errors=True)

    def stop_all(self):
        with self.lock:
            uids = list(self.pods)
        for u in uids:
            self.stop(u)

    def connect(self, pod, port):
        hp = self.get(pod["metadata"]["uid"])
        if hp is None or hp.proc.poll() is not None:
            raise bad_request('unable to upgrade connection: container not found ("%s")'
                              % pod["spec"]["containers"][0]["name"])
        try:
            return connect_in_netns(hp.proc.pid, port)
        except OSError as e:
            raise OSError('failed to connect to localhost:%d inside the namespace of pod "%s", %s'
                          % (port, pod["metadata"]["name"], e.args[0] if e.args else e))

    def logs(self, pod):
        hp = self.get(pod["metadata"]["uid"])
        if hp is None:
            return b""
        with open(hp.log_path, "rb") as f:
            return f.read()


def _rmdir(p):
    try:
        os.rmdir(p)
    except OSError as e:
        log("kubelet: rmdir %s: %s", p, e)
