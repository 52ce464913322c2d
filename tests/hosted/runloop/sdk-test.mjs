// Runloop's own npm client (@runloop/api-client) against the fake (0001-runloop-sdk.sh runs
// it). RUNLOOP_SDK_DIR names the directory whose node_modules holds the client;
// RUNLOOP_BASE_URL and RUNLOOP_API_KEY point at the fake (fake.sh writes them): the client
// reads both from the environment. The client speaks HTTP/2 by default on Node; the fake speaks
// HTTP/1.1, so every client here is made with `http2: false` (the option the client has).
// Prints one JSON line per check: {"ok": true|false, "name": "...", "diag": "..."}.
import { createRequire } from 'node:module'

const require = createRequire(process.env.RUNLOOP_SDK_DIR + '/')
const rl = require('@runloop/api-client')
const { RunloopSDK } = rl
const base = process.env.RUNLOOP_BASE_URL

function report (ok, name, diag) {
  process.stdout.write(JSON.stringify({ ok, name, diag: diag || '' }) + '\n')
}
function expect (cond, name, diag) {
  report(!!cond, name, cond ? '' : diag)
  return !!cond
}
function show (v) {
  if (v instanceof Error) return `${v.name}: ${v.message}`
  return typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v)
}
async function throws (fn) {
  try { await fn() } catch (e) { return e }
  return null
}
async function knobs (body) {
  const r = await fetch(base + '/_fake/knobs', { method: 'POST', body: JSON.stringify(body) })
  if (!r.ok) throw new Error('knobs: HTTP ' + r.status)
}
async function stats () {
  return (await fetch(base + '/_fake/stats')).json()
}
setTimeout(() => {
  report(false, 'the client run finished in time', 'still running after 240 s')
  process.exit(1)
}, 240000).unref()

const sdk = new RunloopSDK({ http2: false, maxRetries: 3 })
expect(sdk.api.baseURL === base, 'the client takes its base URL from RUNLOOP_BASE_URL', sdk.api.baseURL)

const box = await sdk.devbox.create({ name: 'sdk-smoke', environment_variables: { GREETING: 'hello' }, metadata: { who: 'sdk-test' } })
expect(/^dbx_/.test(box.id), 'create gives a devbox id', box.id)
const info = await box.getInfo()
expect(info.status === 'running' && info.name === 'sdk-smoke' && info.metadata.who === 'sdk-test',
  'the devbox is running with its name and metadata', show(info))

// A command with streamed output: the callbacks get the lines as they come.
const lines = []
const errs = []
const r = await box.cmd.exec('for i in 1 2 3; do echo "line $i $GREETING"; sleep 0.2; done; echo oops >&2; exit 3',
  { stdout: l => lines.push(l), stderr: l => errs.push(l) })
expect(r.exitCode === 3, 'the command exit status comes back', show(r.exitCode))
expect(lines.join('') === 'line 1 hello\nline 2 hello\nline 3 hello\n', 'stdout streamed in order, with the devbox env', show(lines))
expect(errs.join('') === 'oops\n', 'stderr streamed apart', show(errs))
expect((await r.stdout()) === 'line 1 hello\nline 2 hello\nline 3 hello\n', 'the result holds stdout', show(await r.stdout()))

// Without callbacks: execute + long poll.
const r2 = await box.cmd.exec('pwd; id -un')
expect(r2.exitCode === 0 && (await r2.stdout()) === '/home/user\nuser\n', 'a command runs as user in /home/user', show(await r2.stdout()))

// An async execution, stdin, kill.
const ex = await box.cmd.execAsync('read a; echo "got $a"; sleep 60', { attach_stdin: true })
await sdk.api.devboxes.executions.sendStdIn(box.id, ex.executionId, { text: 'abc\n' })
let seen = ''
for (let i = 0; i < 100 && !seen.includes('got abc'); i++) {
  const st = await sdk.api.devboxes.executions.retrieve(box.id, ex.executionId)
  seen = st.stdout || ''
  await new Promise(resolve => setTimeout(resolve, 100))
}
expect(seen.includes('got abc'), 'stdin reaches an async command', show(seen))
await ex.kill()
const killed = await ex.result()
expect(killed.exitCode !== 0, 'a killed command ends non-zero', show(killed.exitCode))

// Files: write/read contents, upload/download bytes.
await box.file.write({ file_path: 'notes/a.txt', contents: 'first\n' })
expect((await box.file.read({ file_path: 'notes/a.txt' })) === 'first\n', 'write_file_contents then read_file_contents')
const bytes = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0])
await box.file.upload({ path: '/home/user/bin.dat', file: await rl.toFile(bytes, 'bin.dat') })
const dl = Buffer.from(await (await box.file.download({ path: '/home/user/bin.dat' })).arrayBuffer())
expect(dl.equals(bytes), 'upload_file then download_file keep binary bytes', show([...dl]))
const missing = await throws(() => box.file.download({ path: '/home/user/nope' }))
expect(missing instanceof rl.NotFoundError, 'downloading a missing file is a NotFoundError', show(missing))

// A disk snapshot, and a devbox from it.
const snap = await box.snapshotDisk({ name: 'smoke' })
expect(/^snp_/.test(snap.id), 'snapshot_disk gives a snapshot id', show(snap.id))
const box2 = await sdk.devbox.createFromSnapshot(snap.id)
expect((await box2.file.read({ file_path: 'notes/a.txt' })) === 'first\n', 'a devbox from the snapshot has the file')
await box2.shutdown()

// Suspend and resume.
await box.suspend()
await box.awaitSuspended()
expect((await box.getInfo()).status === 'suspended', 'suspend leaves the devbox suspended')
await box.resume()
expect((await box.file.read({ file_path: 'notes/a.txt' })) === 'first\n', 'resume brings it back with its files')

// Tunnels.
await box.net.enableTunnel({ auth_mode: 'open' })
const url = await box.getTunnelUrl(8080)
expect(/^https:\/\/8080-[a-z0-9]+\.tunnel\./.test(url), 'a tunnel gives a URL per port', url)

// Errors.
const bad = new RunloopSDK({ http2: false, bearerToken: 'wrong', maxRetries: 0 })
const e401 = await throws(() => bad.devbox.create())
expect(e401 instanceof rl.AuthenticationError, 'a wrong key is an AuthenticationError (401)', show(e401))
const e404 = await throws(() => sdk.devbox.createFromBlueprintName('no-such-blueprint'))
expect(e404 instanceof rl.NotFoundError, 'an unknown blueprint is a NotFoundError', show(e404))
const before = (await stats()).rate_limited
await knobs({ rate_limit_next: 1, retry_after: 1 })
const again = await box.getInfo()
expect(again.id === box.id && (await stats()).rate_limited === before + 1, 'a 429 with Retry-After is retried by the client')
await knobs({ rate_limit_next: 5, retry_after: 0 })
const e429 = await throws(() => bad.devbox.create())
expect(e429 instanceof rl.RateLimitError, 'a 429 without retries left is a RateLimitError', show(e429))
await knobs({ rate_limit_next: 0 })

await box.shutdown()
expect((await box.getInfo()).status === 'shutdown', 'shutdown ends the devbox')
const e400 = await throws(() => box.cmd.exec('true'))
expect(e400 instanceof rl.APIError, 'a command on a shut-down devbox fails', show(e400))
process.exit(0)
