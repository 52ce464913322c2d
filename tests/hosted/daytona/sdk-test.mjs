// Daytona's own npm SDK against the fake (fake-daytona.py): one JSON line per check,
// {"ok": bool, "name": ..., "diag": ...}. The environment names the fake (DAYTONA_API_URL,
// DAYTONA_API_KEY, DAYTONA_TARGET, FAKE_DAYTONA_URL, FAKE_DAYTONA_JWT, FAKE_DAYTONA_ORG) and the
// SDK's install (DAYTONA_SDK_DIR).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.env.DAYTONA_SDK_DIR, 'node_modules', 'x.js'));
const { Daytona, DaytonaNotFoundError, DaytonaAuthenticationError } = require('@daytonaio/sdk');

const say = (ok, name, diag) => console.log(JSON.stringify({ ok: !!ok, name, diag: diag ? String(diag) : '' }));
const eq = (got, want, name) => say(JSON.stringify(got) === JSON.stringify(want), name,
  `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
async function fails(fn, cls, name, re) {
  try {
    await fn();
    say(false, name, 'no error');
  } catch (e) {
    say(e instanceof cls && (!re || re.test(e.message)), name, `${e.constructor.name}: ${e.message}`);
  }
}
async function knob(obj) {
  await fetch(process.env.FAKE_DAYTONA_URL + '/_fake/knobs', { method: 'POST', body: JSON.stringify(obj) });
}

// The socket.io event stream the SDK prefers is not served by the fake: state changes are
// polled, as the SDK does with useDeprecatedPolling.
const daytona = new Daytona({ useDeprecatedPolling: true });
const sb = await daytona.create({ envVars: { GREETING: 'hello' }, labels: { suite: 'sbx' } });
eq(sb.state, 'started', 'create gives a started sandbox');
eq(sb.labels.suite, 'sbx', 'its labels are kept');

// A command through process/execute: merged output, exit code.
let r = await sb.process.executeCommand('sh -c "echo out; echo err >&2; exit 3"');
eq([r.exitCode, r.result], [3, 'out\nerr\n'], 'executeCommand: exit code and merged output');
r = await sb.process.executeCommand('pwd', '/tmp');
eq(r.result.trim(), '/tmp', 'executeCommand in a cwd');
r = await sb.process.executeCommand('sh -c "echo $GREETING $X"', undefined, { X: 'there' });
eq(r.result.trim(), 'hello there', 'the sandbox env and the command env');
r = await sb.process.executeCommand('id -un');
eq(r.result.trim(), 'daytona', 'commands run as the sandbox user');

// A session command, async, its logs followed over the WebSocket while it runs: the command
// waits for a file that the stdout callback writes when the first line arrives.
await sb.process.createSession('s1');
const run = await sb.process.executeSessionCommand('s1', {
  command: 'echo first; echo oops >&2; while [ ! -e go ]; do sleep 0.05; done; echo second; exit 5',
  runAsync: true,
});
say(typeof run.cmdId === 'string' && run.cmdId.length > 0, 'an async session command has an id', JSON.stringify(run));
let out = '', err = '', wrote = null;
await sb.process.getSessionCommandLogs('s1', run.cmdId, (s) => {
  out += s;
  if (!wrote && out.includes('first')) wrote = sb.fs.uploadFile(Buffer.from('x'), 'go');
}, (s) => { err += s; });
await wrote;
eq([out, err], ['first\nsecond\n', 'oops\n'], 'streamed stdout and stderr, apart, while it ran');
const cmd = await sb.process.getSessionCommand('s1', run.cmdId);
eq(cmd.exitCode, 5, 'the session command exit code');
const logs = await sb.process.getSessionCommandLogs('s1', run.cmdId);
eq([logs.stdout, logs.stderr], ['first\nsecond\n', 'oops\n'], 'the logs afterwards');
const sync = await sb.process.executeSessionCommand('s1', { command: 'echo sync' });
eq([sync.exitCode, sync.stdout], [0, 'sync\n'], 'a synchronous session command');
const inp = await sb.process.executeSessionCommand('s1', { command: 'read l; echo got $l', runAsync: true });
await sb.process.sendSessionCommandInput('s1', inp.cmdId, 'line\n');
let got = '';
await sb.process.getSessionCommandLogs('s1', inp.cmdId, (s) => { got += s; }, () => {});
eq(got, 'got line\n', 'input sent to a session command');
await sb.process.deleteSession('s1');
await fails(() => sb.process.getSession('s1'), DaytonaNotFoundError, 'a deleted session is gone');

// Files.
const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
await sb.fs.createFolder('work/sub', '750');
await sb.fs.uploadFile(bytes, 'work/sub/all.bin');
const back = await sb.fs.downloadFile('work/sub/all.bin');
say(Buffer.compare(back, bytes) === 0, 'a file of all byte values up and down');
const big = Buffer.alloc(3 << 20, 'z');
await sb.fs.uploadFiles([{ source: big, destination: '/home/daytona/big' }, { source: Buffer.from('b'), destination: 'b.txt' }]);
eq((await sb.fs.downloadFile('big')).length, 3 << 20, 'a 3 MiB file in a bulk upload');
const info = await sb.fs.getFileDetails('work/sub');
eq([info.isDir, info.permissions, info.owner], [true, '0750', 'daytona'], 'file details (dir, mode, owner)');
const list = await sb.fs.listFiles('work/sub');
eq(list.map((f) => [f.name, f.size]), [['all.bin', 256]], 'listFiles');
await sb.fs.setFilePermissions('b.txt', { mode: '600' });
eq((await sb.fs.getFileDetails('b.txt')).permissions, '0600', 'setFilePermissions');
await sb.fs.deleteFile('work', true);
await fails(() => sb.fs.downloadFile('work/sub/all.bin'), Error, 'a removed file cannot be read', /not found/);

// A PTY session over its WebSocket: input, a resize seen by stty, the exit code.
let screen = '';
const pty = await sb.process.createPty({ id: 'p1', cols: 100, rows: 30, envs: { PTYVAR: 'here' },
  onData: (d) => { screen += new TextDecoder().decode(d); } });
await pty.sendInput('stty size; echo "v=$PTYVAR"\n');
for (let i = 0; i < 100 && !screen.includes('v=here'); i++) await new Promise((r) => setTimeout(r, 50));
say(screen.includes('30 100') && screen.includes('v=here'), 'a PTY with its size and env', screen.slice(-300));
await pty.resize(90, 20);
await pty.sendInput('stty size; exit 7\n');
const ptyEnd = await pty.wait();
say(screen.includes('20 90') && ptyEnd.exitCode === 7, 'a resize reaches it; its exit code', `${JSON.stringify(ptyEnd)} ${screen.slice(-200)}`);

// Ports.
const signed = await sb.getSignedPreviewUrl(8080, 60);
say(signed.url.startsWith('https://8080-' + signed.token + '.') && signed.port === 8080, 'a signed preview URL', JSON.stringify(signed));

// Stop and start keep the disk.
await sb.stop();
eq(sb.state, 'stopped', 'stop');
await fails(() => sb.process.executeCommand('true'), Error, 'a stopped sandbox runs nothing');
await sb.start();
eq((await sb.fs.downloadFile('b.txt')).toString(), 'b', 'start: the disk is kept');

// A second client, by JWT and organization, finds the sandbox.
const other = new Daytona({ jwtToken: process.env.FAKE_DAYTONA_JWT, organizationId: process.env.FAKE_DAYTONA_ORG,
  apiKey: undefined, apiUrl: process.env.DAYTONA_API_URL, target: 'us', useDeprecatedPolling: true });
const again = await other.get(sb.id);
eq(again.id, sb.id, 'a JWT client with the organization gets the sandbox');
const found = [];
for await (const s of other.list({ labels: { suite: 'sbx' } })) found.push(s.id);
eq(found, [sb.id], 'list by label');


// The field names the fake answers with are the ones the npm client's generated models declare
// (@daytona/api-client and @daytona/toolbox-api-client, read from the install).
function modelFields(pkg, model) {
  const f = path.join(process.env.DAYTONA_SDK_DIR, 'node_modules', '@daytona', pkg, 'src', 'models', model + '.d.ts');
  return new Set([...fs.readFileSync(f, 'utf8').matchAll(/^\s+'?([A-Za-z0-9_]+)'?\??:/gm)].map((m) => m[1]));
}
async function raw(url, init = {}) {
  const r = await fetch(url, { ...init, headers: { Authorization: `Bearer ${process.env.DAYTONA_API_KEY}`,
    'Content-Type': 'application/json', ...(init.headers || {}) } });
  return r.json();
}
function fieldsIn(obj, pkg, model, name) {
  const known = modelFields(pkg, model);
  const extra = Object.keys(obj).filter((k) => !known.has(k));
  say(known.size > 0 && extra.length === 0, `the fake's ${name} has only fields of the client's ${model}`, extra.join(', '));
}
{
  const api = process.env.DAYTONA_API_URL;
  const s = await raw(`${api}/sandbox/${sb.id}`);
  fieldsIn(s, 'api-client', 'sandbox', 'Sandbox');
  fieldsIn(await raw(`${api}/sandbox/${sb.id}/ports/3000/signed-preview-url`), 'api-client', 'signed-port-preview-url', 'signed preview URL');
  fieldsIn(await raw(`${api}/sandbox/${sb.id}/toolbox-proxy-url`), 'api-client', 'toolbox-proxy-url', 'toolbox proxy URL');
  const box = `${s.toolboxProxyUrl}/${sb.id}`;
  await raw(`${box}/process/session`, { method: 'POST', body: JSON.stringify({ sessionId: 'fields' }) }).catch(() => {});
  const ex = await raw(`${box}/process/session/fields/exec`, { method: 'POST', body: JSON.stringify({ command: 'echo x' }) });
  fieldsIn(ex, 'toolbox-api-client', 'session-execute-response', 'session exec answer');
  fieldsIn(await raw(`${box}/process/session/fields/command/${ex.cmdId}`), 'toolbox-api-client', 'command', 'command');
  fieldsIn(await raw(`${box}/process/session/fields/command/${ex.cmdId}/logs`), 'toolbox-api-client', 'session-command-logs-response', 'command logs');
  fieldsIn(await raw(`${box}/process/session/fields`), 'toolbox-api-client', 'session', 'session');
  fieldsIn(await raw(`${box}/process/execute`, { method: 'POST', body: JSON.stringify({ command: 'true' }) }), 'toolbox-api-client', 'execute-response', 'execute answer');
  fieldsIn(await raw(`${box}/files/info?path=b.txt`), 'toolbox-api-client', 'file-info', 'file info');
  fieldsIn(await raw(`${box}/files/info?path=nonexistent`), 'toolbox-api-client', 'error-response', 'error');
}

// The service's errors.
const wrong = new Daytona({ apiKey: 'wrong', apiUrl: process.env.DAYTONA_API_URL, target: 'us', useDeprecatedPolling: true });
await fails(() => wrong.get(sb.id), DaytonaAuthenticationError, 'a wrong key is refused (401)');
await fails(() => daytona.create({ snapshot: 'no-such-snapshot' }), DaytonaNotFoundError, 'an unknown snapshot is 404', /not found/);
await knob({ rate_limit_next: 1, retry_after: 1 });
await fails(() => daytona.get(sb.id), Error, 'a rate limit is 429', /Too Many Requests/);
eq((await daytona.get(sb.id)).id, sb.id, 'the next request passes');

await sb.delete();
await fails(() => daytona.get(sb.id), DaytonaNotFoundError, 'a deleted sandbox is gone');
process.exit(0);
