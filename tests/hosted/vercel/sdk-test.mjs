// Vercel's own JavaScript client (@vercel/sandbox) against the fake (0001-vercel-sdk.sh runs
// it). VERCEL_SDK_DIR names the directory whose node_modules holds the client; VERCEL_API_URL,
// VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID point at the fake (fake.sh writes them).
// The client has no base-URL option or variable (its API client's base is fixed at
// https://vercel.com/api); it takes a `fetch` function, which here rewrites that base to the
// fake's. Prints one JSON line per check: {"ok": true|false, "name": "...", "diag": "..."}.
import { createRequire } from 'node:module'
import { Writable } from 'node:stream'

const require = createRequire(process.env.VERCEL_SDK_DIR + '/')
const { Sandbox, APIError } = require('@vercel/sandbox')
const base = process.env.VERCEL_API_URL
const VENDOR = 'https://vercel.com/api'
const seen = []

function report (ok, name, diag) {
  process.stdout.write(JSON.stringify({ ok, name, diag: diag || '' }) + '\n')
}
function expect (cond, name, diag) {
  report(!!cond, name, cond ? '' : diag)
  return !!cond
}
function show (v) {
  if (v instanceof Error) return `${v.name}: ${v.message}`
  return JSON.stringify(v)
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
// The client's requests, sent to the fake instead of the service.
function redirect (url, opts) {
  const s = String(url)
  seen.push(s)
  if (!s.startsWith(VENDOR)) throw new Error('the client asked for ' + s)
  return fetch(base + s.slice(VENDOR.length), opts)
}
const creds = {
  token: process.env.VERCEL_TOKEN,
  teamId: process.env.VERCEL_TEAM_ID,
  projectId: process.env.VERCEL_PROJECT_ID,
  fetch: redirect
}
function sink () {
  const chunks = []
  const w = new Writable({ write (c, _e, cb) { chunks.push(Buffer.from(c)); cb() } })
  w.text = () => Buffer.concat(chunks).toString()
  w.count = () => chunks.length
  return w
}

async function main () {
  const sb = await Sandbox.create({ ...creds, runtime: 'node24', ports: [8000], timeout: 120000 })
  expect(sb.name && sb.status === 'running', 'create gives a running sandbox', show({ name: sb.name, status: sb.status }))
  expect(seen.some(u => u.includes('/v2/sandboxes?teamId=' + creds.teamId)),
    'the request carried the team as teamId', seen.join(' '))
  expect(/^http:\/\/.*8000/.test(sb.routes?.[0]?.url || '') || sb.routes?.[0]?.port === 8000,
    'the declared port has a route', show(sb.routes))

  // A command with streamed output (wait mode: one NDJSON stream).
  const out = sink()
  const err = sink()
  const done = await sb.runCommand({
    cmd: 'sh',
    args: ['-c', 'echo one; echo two >&2; sleep 0.3; echo three; pwd; id -un; exit 3'],
    stdout: out,
    stderr: err
  })
  expect(done.exitCode === 3, 'a command gives its exit code', show(done.exitCode))
  expect(out.text() === 'one\nthree\n/vercel/sandbox\nvercel-sandbox\n', 'stdout streams, in the workspace, as vercel-sandbox', show(out.text()))
  expect(err.text() === 'two\n', 'stderr streams apart', show(err.text()))
  expect(out.count() >= 2, 'stdout came in more than one piece', String(out.count()))

  // Detached: the command, then its logs and its end.
  const cmd = await sb.runCommand({ cmd: 'sh', args: ['-c', 'for i in 1 2 3; do echo $i; done'], detached: true, cwd: '/tmp', env: { A: 'b' } })
  const fin = await cmd.wait()
  expect(fin.exitCode === 0, 'a detached command ends with 0', show(fin.exitCode))
  expect(await fin.stdout() === '1\n2\n3\n', 'its logs replay from the start', show(await fin.stdout()))
  const envd = await sb.runCommand({ cmd: 'sh', args: ['-c', 'echo $A $(pwd)'], env: { A: 'b' }, cwd: '/tmp' })
  expect(await envd.stdout() === 'b /tmp\n', 'env and cwd reach the command', show(await envd.stdout()))
  // (The fake's sudo is sbx's own account of the sandbox: a local sandbox has no root.)
  const root = await sb.runCommand({ cmd: 'id', args: ['-un'], sudo: true })
  const who = await root.stdout()
  expect(root.exitCode === 0 && who !== '' && who !== 'vercel-sandbox\n', 'sudo runs as another user', show(who))

  // Kill a running command.
  const long = await sb.runCommand({ cmd: 'sleep', args: ['30'], detached: true })
  await long.kill('SIGTERM')
  const killed = await long.wait()
  expect(killed.exitCode === 143, 'a killed command ends 128+15', show(killed.exitCode))

  // Files: write (tar.gz), read, mkdir.
  await sb.mkDir('sub')
  await sb.writeFiles([{ path: 'sub/hello.txt', content: Buffer.from('hello vercel\n') },
    { path: '/vercel/sandbox/bin.dat', content: Buffer.from([0, 1, 2, 255]) }])
  const back = await sb.readFileToBuffer({ path: 'sub/hello.txt' })
  expect(back && back.toString() === 'hello vercel\n', 'a written file reads back', show(back && back.toString()))
  const bin = await sb.readFileToBuffer({ path: 'bin.dat' })
  expect(bin && bin.equals(Buffer.from([0, 1, 2, 255])), 'binary contents survive', show(bin && [...bin]))
  const cat = await sb.runCommand('cat', ['sub/hello.txt'])
  expect(await cat.stdout() === 'hello vercel\n', 'the file is in the sandbox', show(await cat.stdout()))
  expect(await sb.readFileToBuffer({ path: 'nope' }) === null, 'a missing file reads as null')
  const dup = await throws(() => sb.mkDir('sub'))
  expect(dup instanceof APIError, 'mkdir of an existing directory fails', show(dup))

  // Errors: rate limit retried, a bad token, an unknown snapshot.
  const before = (await stats()).rate_limited
  await knobs({ rate_limit_next: 1, retry_after: 1 })
  const again = await sb.runCommand('true')
  expect(again.exitCode === 0 && (await stats()).rate_limited === before + 1,
    'a 429 with Retry-After is retried by the client', show(await stats()))
  const bad = await throws(() => Sandbox.create({ ...creds, token: 'wrong' }))
  expect(bad instanceof APIError && bad.response.status === 403, 'a wrong token is refused (403)', show(bad))
  const nosnap = await throws(() => Sandbox.create({ ...creds, source: { type: 'snapshot', snapshotId: 'snap_nope' } }))
  expect(nosnap instanceof APIError && nosnap.response.status === 404 && nosnap.json?.error?.code === 'snapshot_not_found',
    'an unknown snapshot is refused', show(nosnap))
  const noruntime = await throws(() => Sandbox.create({ ...creds, runtime: 'cobol' }))
  expect(noruntime instanceof APIError && noruntime.response.status === 400, 'an unknown runtime is refused', show(noruntime))

  // A native snapshot stops the session; a sandbox made from it has the files.
  const snap = await sb.snapshot()
  expect(snap.snapshotId && sb.status === 'stopped', 'a snapshot stops the sandbox', show({ id: snap.snapshotId, status: sb.status }))
  const sb2 = await Sandbox.create({ ...creds, source: { type: 'snapshot', snapshotId: snap.snapshotId } })
  const b2 = await sb2.readFileToBuffer({ path: 'sub/hello.txt' })
  expect(b2 && b2.toString() === 'hello vercel\n', 'a sandbox made from the snapshot has the file', show(b2 && b2.toString()))

  // Get by name resumes a stopped sandbox (a new session) with its disk.
  const got = await Sandbox.get({ ...creds, name: sb.name, resume: true })
  expect(got.status === 'running', 'get with resume starts a stopped sandbox', show(got.status))
  const b3 = await got.readFileToBuffer({ path: 'sub/hello.txt' })
  expect(b3 && b3.toString() === 'hello vercel\n', 'the resumed sandbox kept its disk', show(b3 && b3.toString()))

  // Delete both; a deleted sandbox is not found.
  await got.delete()
  await sb2.delete()
  const gone = await throws(() => Sandbox.get({ ...creds, name: sb.name }))
  expect(gone instanceof APIError && gone.response.status === 404, 'a deleted sandbox is not found', show(gone))
  expect((await stats()).sandboxes === 0, 'nothing is left at the fake', show(await stats()))
  expect(seen.every(u => u.startsWith(VENDOR)), 'every request went to the vendor base the fetch rewrote')
}

main().catch(e => { report(false, 'the script ran to its end', show(e) + '\n' + (e.stack || '')); process.exitCode = 1 })
