#!/usr/bin/env python3
"""10,000 sbx sandboxes on Kubernetes, on paper: a small discrete-event model (standard library
only) fed with figures measured on this machine (bench/bench-kube against the fake API server,
bench-docker, bench-local, bench-snapshot) and published ones (agent-sandbox's scale CI).

    bench/k8s-model.py [--sandboxes N] [--figures FILE] [--seed S] [--json]

FILE is what `bench-kube --figures FILE` wrote (measured create/exec/snapshot costs and the
10,000-object load test); without it the figures recorded in FIGURES below are used. Every
section prints what it assumes next to what it computes; docs/internals/scale.md explains the
results and the limits they show.
"""
import argparse
import heapq
import json
import math
import random
import sys

# Figures measured on the 2-core test machine (bench/README.md has the runs) and published ones.
# bench-kube --figures FILE writes the measured part again; FILE overrides these.
FIGURES = {
    # bench-kube against the fake API server (tests/kubernetes/fake-apiserver.py, pods run by a
    # private dockerd; 2026-12-03, bench/README.md): Sandbox create -> Ready -> session, exec
    # round trip of `true`, tar of a 32 MiB workspace streamed out through exec (MiB/s), a
    # sandbox from that snapshot, 60 running commands' descriptors and threads.
    "fake_create_ms": 364.0,
    "fake_exec_ms": 70.5,
    "fake_snapshot_mib_s": 41.7,
    "fake_restore_ms": 1597.0,
    "harness_fds_per_command": 6.0,
    "harness_threads": 2,
    # The load test: the fake holding 10,000 Sandbox objects (--kubelet none): a full list
    # (wall, and sbx's own CPU of it), attach by id, the shared watch's start, and how fast sbx
    # decodes watch events (10,000 real objects as MODIFIED events, one core).
    "load_objects": 10000,
    "load_list_s": 8.67,
    "load_list_cpu_s": 0.73,
    "load_attach_ms": 168.0,
    "load_watch_start_ms": 253.0,
    "load_decode_events_s": 14793.0,
    # bench-docker (bench/README.md, 2026-12-02): create and exec through dockerd.
    "docker_create_ms": 352.7,
    "docker_exec_ms": 74.2,
    "local_create_ms": 50.5,
    "local_exec_ms": 3.2,
    # Published: agent-sandbox's KWOK scale CI (dev/ci/presubmits/test-e2e-scalability-kwok):
    # warm pool 1050, 75 claims/s, claim latency P50/P90 <= 300 ms, P99 <= 500 ms.
    "pub_claim_rate": 75.0,
    "pub_claim_p50_ms": 300.0,
    "pub_claim_p99_ms": 500.0,
    "pub_warm_pool": 1050,
}

# Sizes of the objects as a real API server stores them (JSON with managedFields, which the
# fake does not keep); a pod with one container and a volume is 4-8 KiB in etcd.
OBJECT_BYTES = {"Sandbox": 6000, "Pod": 7000, "PersistentVolumeClaim": 1800,
                "PersistentVolume": 1600, "SandboxClaim": 2500, "Event": 1100}


def lognormal(rng, median, p99):
    """A sample of the lognormal with that median and 99th percentile."""
    sigma = max(math.log(p99 / median) / 2.326, 1e-6)
    return median * math.exp(sigma * rng.gauss(0.0, 1.0))


def pct(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


# ---- 1. API objects, etcd and watch fan-out ---------------------------------------------------

def objects(n, churn_per_s):
    per = {
        "Sandbox (agent-sandbox, image)": ["Sandbox", "Pod", "PersistentVolumeClaim", "PersistentVolume"],
        "SandboxClaim on a warm pool": ["SandboxClaim", "Sandbox", "Pod", "PersistentVolumeClaim",
                                        "PersistentVolume"],
        "bare Pod (no agent-sandbox)": ["Pod", "PersistentVolumeClaim", "PersistentVolume"],
    }
    out = {}
    for mode, kinds in per.items():
        count = n * len(kinds)
        live = n * sum(OBJECT_BYTES[k] for k in kinds)
        # A pod start writes about 6 events (Scheduled, Pulling/Pulled, Created, Started, and
        # the attach); events live an hour (--event-ttl).
        events = churn_per_s * 3600 * 6
        # Writes per sandbox life: create, ~4 status updates of the top object, ~6 of the pod,
        # 2 of the claim and volume, delete and finalizers: about 16.
        writes_s = churn_per_s * 16
        out[mode] = {"objects": count, "live_mib": live / 2**20,
                     "events_live": events, "events_mib": events * OBJECT_BYTES["Event"] / 2**20,
                     "writes_per_s": writes_s,
                     # etcd keeps every revision until compaction (5 min by default).
                     "history_mib": writes_s * 300 * 6000 / 2**20}
    return out


def fanout(n, harnesses, churn_per_s, status_updates_per_s):
    events_s = churn_per_s * 16 + status_updates_per_s
    return {
        "events_per_s": events_s,
        # One shared watch per harness process: each event is checked against H watchers.
        "shared_watch_checks_per_s": events_s * harnesses,
        "shared_watch_streams": harnesses,
        # One watch per sandbox: every event is checked against every sandbox's watcher.
        "per_sandbox_checks_per_s": events_s * n,
        "per_sandbox_streams": n,
    }


# ---- 2. warm pool against claim latency (Little's law, and a simulation) -----------------------

def simulate_pool(rng, rate, pool, cold_median_s, cold_p99_s, adopt_median_ms, adopt_p99_ms,
                  create_qps=1000.0, claims=20000):
    """Claims arrive (Poisson, `rate` per s); one finds a ready warm sandbox (adoption latency)
    or waits for a cold start; every claim makes the pool start a replacement, limited by the
    controller's client QPS. Returns latencies (s) and the share served warm."""
    ready = pool
    events = []  # (time, kind)
    t = 0.0
    next_create = 0.0
    waiting = []  # arrival times of claims waiting for a sandbox
    lat = []
    warm = 0
    for _ in range(claims):
        t += rng.expovariate(rate)
        heapq.heappush(events, (t, "claim"))
    while events:
        now, kind = heapq.heappop(events)
        if kind == "claim":
            if ready > 0:
                ready -= 1
                warm += 1
                lat.append(lognormal(rng, adopt_median_ms, adopt_p99_ms) / 1000.0)
            else:
                waiting.append(now)
            # The pool refills: one create per claim, at most create_qps per second.
            start = max(now, next_create)
            next_create = start + 1.0 / create_qps
            heapq.heappush(events, (start + lognormal(rng, cold_median_s, cold_p99_s), "ready"))
        else:
            if waiting:
                arrived = waiting.pop(0)
                lat.append(now - arrived + lognormal(rng, adopt_median_ms, adopt_p99_ms) / 1000.0)
            else:
                ready += 1
    return lat, warm / float(claims)


def warm_pool_table(rng, fig):
    rows = []
    adopt50, adopt99 = fig["pub_claim_p50_ms"] * 0.5, fig["pub_claim_p99_ms"] * 0.6
    for rate in (20.0, fig["pub_claim_rate"]):
        for cold in (fig["fake_create_ms"] / 1000.0, 5.0, 30.0):
            little = rate * cold
            for factor in (0.5, 1.0, 1.5, 2.0):
                pool = max(1, int(round(little * factor)))
                lat, hit = simulate_pool(rng, rate, pool, cold, cold * 3, adopt50, adopt99,
                                         claims=8000)
                rows.append({"claims_per_s": rate, "cold_start_s": round(cold, 2),
                             "little_pool": round(little, 1), "pool": pool, "hit": hit,
                             "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000})
    return rows


# ---- 3. exec through the API server --------------------------------------------------------------

def exec_load(n, active, interval_s, exec_s, nodes, fig):
    rate = n * active / interval_s
    concurrent = rate * exec_s  # Little's law: streams open at once
    return {"execs_per_s": rate, "concurrent_streams": concurrent,
            "apiserver_connections": 2 * concurrent,  # client side and kubelet side
            "streams_per_kubelet": concurrent / nodes,
            "fake_exec_ms": fig["fake_exec_ms"], "docker_exec_ms": fig["docker_exec_ms"],
            "local_exec_ms": fig["local_exec_ms"],
            # What the round trip costs the harness: one exec per command, measured.
            "harness_exec_busy": rate * fig["fake_exec_ms"] / 1000.0}


# ---- 4. harness threads and descriptors ---------------------------------------------------------

def harness(n, active, interval_s, exec_s, fig):
    running = n * active / interval_s * exec_s
    fds = running * fig["harness_fds_per_command"]
    return {"running_commands": running, "fds": fds,
            "rlimit_nofile_needed": int(math.ceil((fds + 256) / 1024.0)) * 1024,
            "threads": fig["harness_threads"],
            "threads_thread_per_command": running + fig["harness_threads"],
            "idle_sandbox_fds": 0}


# ---- 5. snapshots ---------------------------------------------------------------------------------

def snapshots(rng, n, median_mib, p99_mib, per_hour, changed, fig):
    sizes = [lognormal(rng, median_mib, p99_mib) for _ in range(n)]
    total = sum(sizes)
    per_s = total * per_hour / 3600.0
    return {"workspace_total_gib": total / 1024.0,
            "tar_stream_mib_s": per_s,
            "streams_needed": per_s / fig["fake_snapshot_mib_s"],
            "store_growth_gib_per_day": total * changed * per_hour * 24 / 1024.0,
            "per_stream_mib_s": fig["fake_snapshot_mib_s"]}


# ---- 6. node loss and recovery from the last snapshot ---------------------------------------------

def node_loss(rng, n, pods_per_node, node_mtbf_days, days, detect_s, snapshot_interval_s,
              restore_mib_s, median_mib, cold_s, parallel=16):
    """Nodes fail (Poisson, MTBF per node); each failure takes its sandboxes down; they are seen
    gone after detect_s and come back on other nodes from their last snapshot: a cold start and
    a restore each, `parallel` at a time (the harness's restores of one failure queue)."""
    nodes = int(math.ceil(n / float(pods_per_node)))
    per_node = int(round(n / float(nodes)))
    failures = []
    t = 0.0
    horizon = days * 86400.0
    rate = nodes / (node_mtbf_days * 86400.0)
    while True:
        t += rng.expovariate(rate)
        if t > horizon:
            break
        failures.append(t)
    downtime, lost, last_back = [], [], []
    for _ in failures:
        slots = [0.0] * parallel  # when each restore slot is free, from detection on
        heapq.heapify(slots)
        for _ in range(per_node):
            size = lognormal(rng, median_mib, median_mib * 10)
            free_at = heapq.heappop(slots)
            done = free_at + cold_s + size / restore_mib_s
            heapq.heappush(slots, done)
            downtime.append(detect_s + done)
            lost.append(rng.uniform(0, snapshot_interval_s))
        last_back.append(detect_s + max(slots))
    sandbox_hours = n * days * 24.0
    return {"nodes": nodes, "sandboxes_per_node": per_node, "failures": len(failures),
            "sandboxes_hit": len(downtime),
            "downtime_p50_s": pct(downtime, 50), "downtime_p99_s": pct(downtime, 99),
            "node_recovered_p50_s": pct(last_back, 50),
            "lost_work_mean_s": sum(lost) / len(lost) if lost else 0.0,
            "availability": 1.0 - sum(downtime) / 3600.0 / sandbox_hours if downtime else 1.0}


def run(args):
    fig = dict(FIGURES)
    if args.figures:
        with open(args.figures) as f:
            fig.update(json.load(f))
    rng = random.Random(args.seed)
    n = args.sandboxes
    res = {"figures": fig, "sandboxes": n}
    res["objects"] = objects(n, churn_per_s=n / 3600.0)
    res["fanout"] = fanout(n, harnesses=10, churn_per_s=n / 3600.0, status_updates_per_s=n / 60.0)
    res["warm_pool"] = warm_pool_table(rng, fig)
    res["exec"] = exec_load(n, active=0.3, interval_s=5.0, exec_s=2.0,
                            nodes=int(math.ceil(n / 100.0)), fig=fig)
    res["harness"] = harness(n, active=0.3, interval_s=5.0, exec_s=2.0, fig=fig)
    res["snapshots"] = snapshots(rng, n, 50.0, 2000.0, 1.0, 0.05, fig)
    res["node_loss"] = {
        "default tolerations (300 s)": node_loss(rng, n, 100, 30.0, 30, 40 + 300, 3600.0,
                                                 fig["fake_snapshot_mib_s"], 50.0,
                                                 fig["fake_create_ms"] / 1000.0),
        "30 s tolerations": node_loss(rng, n, 100, 30.0, 30, 40 + 30, 3600.0,
                                      fig["fake_snapshot_mib_s"], 50.0,
                                      fig["fake_create_ms"] / 1000.0),
        "30 s tolerations, snapshots every 10 min": node_loss(rng, n, 100, 30.0, 30, 40 + 30, 600.0,
                                                              fig["fake_snapshot_mib_s"], 50.0,
                                                              fig["fake_create_ms"] / 1000.0),
    }
    # The harness's own cost of 10,000 objects, from the load test.
    res["harness_control_plane"] = {
        "list_s": fig["load_list_s"] * n / fig["load_objects"],
        "list_cpu_s": fig["load_list_cpu_s"] * n / fig["load_objects"],
        "attach_ms": fig["load_attach_ms"],
        "watch_start_ms": fig["load_watch_start_ms"],
        "decode_events_per_s": fig["load_decode_events_s"],
        "decode_share": res["fanout"]["events_per_s"] / fig["load_decode_events_s"],
    }
    return res


def show(res):
    n = res["sandboxes"]
    p = print
    p("== %d sandboxes on Kubernetes ==" % n)
    p("\n1. API objects and etcd (churn: every sandbox replaced once an hour)")
    for mode, o in res["objects"].items():
        p("  %-32s %6d objects, %6.1f MiB live; events %6d (%5.1f MiB); %5.1f writes/s; "
          "history kept 5 min %5.1f MiB" % (mode, o["objects"], o["live_mib"], o["events_live"],
                                            o["events_mib"], o["writes_per_s"], o["history_mib"]))
    f = res["fanout"]
    p("  watch fan-out: %.0f events/s; one watch per harness (10 harnesses): %.0f checks/s on %d "
      "streams; one per sandbox: %.0f checks/s on %d streams"
      % (f["events_per_s"], f["shared_watch_checks_per_s"], f["shared_watch_streams"],
         f["per_sandbox_checks_per_s"], f["per_sandbox_streams"]))
    p("\n2. warm pool against claim latency (adoption P50/P99 from agent-sandbox's scale CI)")
    p("  %9s %9s %11s %6s %6s %9s %9s" % ("claims/s", "cold (s)", "Little N", "pool", "warm",
                                          "p50 ms", "p99 ms"))
    for r in res["warm_pool"]:
        p("  %9.0f %9.2f %11.1f %6d %5.0f%% %9.0f %9.0f" % (r["claims_per_s"], r["cold_start_s"],
                                                           r["little_pool"], r["pool"],
                                                           100 * r["hit"], r["p50_ms"],
                                                           r["p99_ms"]))
    e = res["exec"]
    p("\n3. exec through the API server (30% active, a command every 5 s, 2 s each)")
    p("  %.0f execs/s, %.0f streams open, %.0f API server connections, %.1f streams per kubelet;"
      " round trip measured: fake %.0f ms, docker %.0f ms, local %.1f ms"
      % (e["execs_per_s"], e["concurrent_streams"], e["apiserver_connections"],
         e["streams_per_kubelet"], e["fake_exec_ms"], e["docker_exec_ms"], e["local_exec_ms"]))
    h = res["harness"]
    p("\n4. harness threads and descriptors")
    p("  %.0f commands running: %.0f fds (RLIMIT_NOFILE >= %d), %d threads with the event loop "
      "(%.0f with a thread per command); an idle sandbox holds %d fds"
      % (h["running_commands"], h["fds"], h["rlimit_nofile_needed"], h["threads"],
         h["threads_thread_per_command"], h["idle_sandbox_fds"]))
    s = res["snapshots"]
    p("\n5. snapshots (workspaces: median 50 MiB, P99 2 GiB; one an hour; 5% changed)")
    p("  %.0f GiB of workspaces; %.0f MiB/s of tar through the harness = %.1f streams at the "
      "measured %.0f MiB/s each; store growth %.0f GiB/day after dedup"
      % (s["workspace_total_gib"], s["tar_stream_mib_s"], s["streams_needed"],
         s["per_stream_mib_s"], s["store_growth_gib_per_day"]))
    p("\n6. node loss (100 sandboxes per node, node MTBF 30 days, 30 days simulated, 16 restores at a time)")
    for name, r in res["node_loss"].items():
        p("  %-40s %3d nodes, %3d failures, %5d sandboxes hit; down P50 %5.0f s, P99 %6.0f s; "
          "all back %5.0f s; work lost %5.0f s mean; availability %.5f"
          % (name, r["nodes"], r["failures"], r["sandboxes_hit"], r["downtime_p50_s"],
             r["downtime_p99_s"], r["node_recovered_p50_s"], r["lost_work_mean_s"],
             r["availability"]))
    c = res["harness_control_plane"]
    p("\n7. the harness's control plane (from the 10,000-object load test)")
    p("  list of all sandboxes %.1f s (%.2f s of harness CPU), attach %.0f ms, shared watch "
      "started in %.0f ms; decoding %.0f events/s on one core: the cluster's %.0f events/s take "
      "%.1f%% of a core" % (c["list_s"], c["list_cpu_s"], c["attach_ms"], c["watch_start_ms"],
                            c["decode_events_per_s"], res["fanout"]["events_per_s"],
                            100 * c["decode_share"]))


def main():
    ap = argparse.ArgumentParser(description="a model of N sbx sandboxes on Kubernetes")
    ap.add_argument("--sandboxes", type=int, default=10000)
    ap.add_argument("--figures", help="JSON of measured figures (bench-kube --figures FILE)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    if args.sandboxes < 1:
        sys.exit("k8s-model: --sandboxes must be at least 1")
    res = run(args)
    if args.json:
        json.dump(res, sys.stdout, indent=1, sort_keys=True)
        print()
    else:
        show(res)


if __name__ == "__main__":
    main()
