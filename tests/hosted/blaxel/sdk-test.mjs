// Blaxel's own npm client (@blaxel/core) against the fake (fake-blaxel.py): one JSON line per
// check, {"ok": bool, "name": ..., "diag": ...}. The environment names the fake (BL_API_URL,
// BL_RUN_URL, BL_API_KEY, BL_WORKSPACE, FAKE_BLAXEL_URL) and the client's install
// (BLAXEL_SDK_DIR). Without FAKE_BLAXEL_URL it runs against the real service (0003): the
// checks that need the fake's knobs or previews are left out, and one more asks whether the
// API takes a plain `Authorization: Bearer` header (what sbx's remote layer sends).
import { createRequire } from 'node:module';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';

const require = createRequire(path.join(process.env.BLAXEL_SDK_DIR, 'node_modules', 'x.js'));
const { SandboxInstance } = require('@blaxel/core');

const say = (ok, name, diag) => console.log(JSON.stringify({ ok: !!ok, name, diag: diag ? String(diag) : '' }));
const eq = (got, want, name) => say(JSON.stringify(got) === JSON.stringify(want), name,
  `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
const text = (e) => `${e && e.message ? e.message : ''} ${JSON.stringify(e)}`;
async function fails(fn, name, re) {
  try {
    await fn();
    say(false, name, 'no error');
  } catch (e) {
    say(re.test(text(e)), name, text(e));
  }
}
async function knob(obj) {
  await fetch(process.env.FAKE_BLAXEL_URL + '/_fake/knobs', { method: 'POST', body: JSON.stringify(obj) });
}

const fake = !!process.env.FAKE_BLAXEL_URL;
const name = 'sbx-sdk-' + process.pid;
const sb = await SandboxInstance.create({
  name, image: 'blaxel/base-image:latest', memory: 2048, labels: { suite: 'sbx' },
  envs: [{ name: 'GREETING', value: 'hello' }],
});
eq(sb.status, 'DEPLOYED', 'create gives a deployed sandbox');
eq(sb.metadata.name, name, 'with the name asked for');
eq(sb.metadata.labels.suite, 'sbx', 'and its labels');
say(typeof sb.metadata.url === 'string' && sb.metadata.url.includes(`/sandboxes/${name}`),
  'its metadata.url is the sandbox API', sb.metadata.url);

// A command whose output streams (NDJSON) while it runs, then its result.
const out = [], err = [];
let r = await sb.process.exec({
  command: 'echo one; echo two >&2; echo $GREETING $X; exit 3', waitForCompletion: true,
  env: { X: 'there' }, onStdout: (d) => out.push(d), onStderr: (d) => err.push(d),
});
eq([r.exitCode, r.status], [3, 'failed'], 'exec streamed: exit code and status');
eq(out.join(''), 'one\nhello there\n', 'exec streamed: stdout as it came (sandbox env and command env)');
eq(err.join(''), 'two\n', 'exec streamed: stderr apart');

// Without a callback: the whole result at once.
r = await sb.process.exec({ command: 'pwd; cd /tmp && pwd', waitForCompletion: true, workingDir: '/workspace' });
eq([r.exitCode, r.stdout], [0, '/workspace\n/tmp\n'], 'exec in a working directory');

// A background process: get, wait, logs.
r = await sb.process.exec({ command: 'sleep 0.3; echo late', name: 'bg' });
eq(r.status, 'running', 'a process started without waiting is running');
r = await sb.process.wait('bg', { maxWait: 30000, interval: 100 });
eq([r.status, r.exitCode], ['completed', 0], 'wait by name: completed');
eq(await sb.process.logs('bg', 'stdout'), 'late\n', 'its logs');

// Logs streamed from a running process (stdout:/stderr: lines).
const lines = [];
const bg = await sb.process.exec({ command: 'for i in 1 2 3; do echo line$i; sleep 0.1; done', onLog: (l) => lines.push(l) });
await sb.process.wait(bg.pid, { maxWait: 30000, interval: 100 });
await new Promise((res) => setTimeout(res, 300));
bg.close();
eq(lines, ['line1', 'line2', 'line3'], 'logs stream line by line');

// Kill.
r = await sb.process.exec({ command: 'sleep 60' });
await sb.process.kill(r.pid);
r = await sb.process.wait(r.pid, { maxWait: 30000, interval: 100 });
eq(r.status, 'killed', 'kill ends a process');

// Stdin.
r = await sb.process.exec({ command: 'tr a-z A-Z', stdin: true });
await sb.process.writeStdin(r.pid, 'hello stdin\n');
await sb.process.closeStdin(r.pid);
r = await sb.process.wait(r.pid, { maxWait: 30000, interval: 100 });
eq(r.stdout, 'HELLO STDIN\n', 'stdin reaches the process and EOF ends it');

// Files: text, binary (every byte value), directories, listing, removal.
await sb.fs.write('/workspace/notes/a.txt', 'hello file\n');
eq(await sb.fs.read('/workspace/notes/a.txt'), 'hello file\n', 'write then read a text file');
const bytes = new Uint8Array(256).map((_, i) => i);
await sb.fs.writeBinary('/workspace/bin/all.bin', bytes);
const blob = await sb.fs.readBinary('/workspace/bin/all.bin');
eq(Buffer.from(await blob.arrayBuffer()).equals(Buffer.from(bytes)), true, 'binary round trip keeps every byte');
await sb.fs.mkdir('/workspace/empty');
const ls = await sb.fs.ls('/workspace');
eq(ls.subdirectories.map((d) => d.name).sort(), ['bin', 'empty', 'notes'], 'ls: subdirectories');
const nl = await sb.fs.ls('/workspace/notes');
eq(nl.files.map((f) => [f.name, f.size]), [['a.txt', 11]], 'ls: files with their sizes');
r = await sb.process.exec({ command: 'cat /workspace/notes/a.txt; stat -c %a /workspace/bin/all.bin', waitForCompletion: true });
eq(r.stdout, 'hello file\n644\n', 'files are real in the sandbox, mode 0644');
await sb.fs.rm('/workspace/notes', true);
await fails(() => sb.fs.read('/workspace/notes/a.txt'), 'a removed file is gone (404)', /404/);

if (fake) {
  // Previews: a server in the sandbox reached through a public preview, and a private one only
  // with its token. The preview's host name is the fake's: the request goes to the fake's
  // address with that Host, as DNS would send it to Blaxel's edge.
  function through(url, headers = {}) {
    const u = new URL(url), f = new URL(process.env.FAKE_BLAXEL_URL);
    const mod = f.protocol === 'https:' ? https : http;
    return new Promise((res, rej) => {
      const q = mod.request({ host: '127.0.0.1', port: f.port, path: u.pathname + u.search,
        headers: { Host: u.host, ...headers }, servername: 'localhost' }, (r) => {
        let b = '';
        r.on('data', (d) => { b += d; });
        r.on('end', () => res([r.statusCode, b]));
      });
      q.on('error', rej);
      q.end();
    });
  }
  await sb.fs.write('/workspace/site/hello.txt', 'hello preview\n');
  await sb.process.exec({ command: 'cd /workspace/site && exec python3 -m http.server 8123 --bind 127.0.0.1', name: 'web' });
  r = await sb.process.exec({ command: 'for i in $(seq 100); do python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8123))" 2>/dev/null && exit 0; sleep 0.1; done; exit 1', waitForCompletion: true });
  eq(r.exitCode, 0, 'a server listens in the sandbox');
  const pub = await sb.previews.create({ metadata: { name: 'port-8123' }, spec: { port: 8123, public: true } });
  eq([pub.spec.port, pub.spec.public], [8123, true], 'a public preview of the port');
  let [code, body] = await through(pub.spec.url.replace(/\/?$/, '/hello.txt'));
  eq([code, body], [200, 'hello preview\n'], 'the public preview reaches the server');
  const priv = await sb.previews.create({ metadata: { name: 'private-8123' }, spec: { port: 8123, public: false } });
  [code] = await through(priv.spec.url.replace(/\/?$/, '/hello.txt'));
  eq(code, 401, 'a private preview without its token is refused');
  const tok = await priv.tokens.create(new Date(Date.now() + 3600 * 1000));
  [code, body] = await through(priv.spec.url.replace(/\/?$/, '/hello.txt?bl_preview_token=' + encodeURIComponent(tok.value)));
  eq([code, body], [200, 'hello preview\n'], 'with its token it reaches the server');
  eq((await sb.previews.list()).map((x) => x.name).sort(), ['port-8123', 'private-8123'], 'the previews are listed');
  await sb.process.kill('web');
} else {
  say(true, 'previews: skipped on the real service (its base image need not have python3)');
}

// The control plane: get, list, errors.
const again = await SandboxInstance.get(name);
eq(again.metadata.url, sb.metadata.url, 'get finds the sandbox');
const page = await SandboxInstance.list();
eq(page.data.map((s) => s.metadata.name).includes(name), true, 'list has it');
await fails(() => SandboxInstance.get('no-such-sandbox'), 'get of an unknown sandbox: 404', /WORKLOAD_NOT_FOUND/);
if (fake) {
  await fails(() => SandboxInstance.create({ name: name + '-x', image: 'no/such-image:1' }),
    'an unknown image is refused', /image no\/such-image:1 not found/);
  await knob({ rate_limit_next: 1, retry_after: 7 });
  await fails(() => SandboxInstance.get(name), 'a rate limit is a 429 error', /TOO_MANY_REQUESTS/);
  await knob({ bad_key: true });
  await fails(() => SandboxInstance.get(name), 'a bad key is refused', /"code":401,"error":"Unauthorized"/);
  await knob({ bad_key: false });
  await knob({ max_sandboxes: 1 });
  await fails(() => SandboxInstance.create({ name: name + '-y' }), 'over the quota: 402', /USAGE_LIMIT_EXCEEDED/);
  await knob({ max_sandboxes: 0 });
  const other = await SandboxInstance.create({ name: name + '-z', image: 'sbx-test-image' });
  eq(other.status, 'DEPLOYED', 'a second sandbox from another image');
  await knob({ forget: name + '-z' });
  await fails(() => other.process.exec({ command: 'true', waitForCompletion: true }), 'a sandbox that expired: its API answers 404', /WORKLOAD_NOT_FOUND/);
}

if (!fake) {
  const base = process.env.BL_API_URL || 'https://api.blaxel.ai/v0';
  const res = await fetch(`${base}/sandboxes/${name}`, { headers: {
    Authorization: `Bearer ${process.env.BL_API_KEY}`, 'X-Blaxel-Workspace': process.env.BL_WORKSPACE } });
  eq(res.status, 200, 'the API takes Authorization: Bearer with X-Blaxel-Workspace');
}

// Delete: the sandbox and its API are gone.
await SandboxInstance.delete(name);
await fails(() => SandboxInstance.get(name), 'a deleted sandbox is gone', /WORKLOAD_NOT_FOUND/);
await fails(() => sb.process.exec({ command: 'true', waitForCompletion: true }), 'its API answers 404', /404/);
