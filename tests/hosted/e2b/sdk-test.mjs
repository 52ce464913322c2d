// E2B's own JavaScript SDK against the fake (0001-e2b-sdk.sh runs it). E2B_SDK_DIR names the
// directory whose node_modules holds the SDK; E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
// point at the fake (fake.sh writes them). Prints one JSON line per check:
// {"ok": true|false, "name": "...", "diag": "..."}.
import { createRequire } from 'node:module'
import http from 'node:http'
import https from 'node:https'

const require = createRequire(process.env.E2B_SDK_DIR + '/')
const e2b = require('e2b')
const { Sandbox, CommandExitError, AuthenticationError, RateLimitError, FileNotFoundError,
  SandboxNotFoundError, InvalidArgumentError, SandboxError, TimeoutError } = e2b
const quick = process.argv.includes('--quick')
const apiUrl = process.env.E2B_API_URL
const envdUrl = process.env.E2B_SANDBOX_URL

function report (ok, name, diag) {
  process.stdout.write(JSON.stringify({ ok, name, diag: diag || '' }) + '\n')
}
function expect (cond, name, diag) {
  report(!!cond, name, cond ? '' : diag)
  return !!cond
}
function show (v) {
  if (v instanceof Error) return `${v.name}: ${v.message}`
  return typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v, null, 0)
}
async function throws (fn) {
  try { await fn() } catch (e) { return e }
  return null
}
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
async function until (fn, what, tries = 200) {
  for (let i = 0; i < tries; i++) {
    if (await fn()) return true
    await sleep(100)
  }
  throw new Error('gave up waiting for ' + what)
}
async function knobs (body) {
  const r = await fetch(apiUrl + '/_fake/knobs', { method: 'POST', body: JSON.stringify(body) })
  if (!r.ok) throw new Error('knobs: HTTP ' + r.status)
}
async function stats () {
  return (await fetch(apiUrl + '/_fake/stats')).json()
}
// A request to envd with headers fetch() will not send (Host), or without the SDK.
function raw (method, path, headers, body) {
  const u = new URL(envdUrl)
  const mod = u.protocol === 'https:' ? https : http
  return new Promise((resolve, reject) => {
    const req = mod.request({ host: u.hostname, port: u.port, method, path, headers }, res => {
      const chunks = []
      res.on('data', c => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

// A hung request fails the run instead of the test's own timeout killing it silently.
setTimeout(() => {
  report(false, 'the SDK run finished in time', 'still running after 300 s')
  process.exit(1)
}, 300000).unref()

// A Connect server stream by hand: POST one envelope (flag byte, 4-byte big-endian length,
// JSON), read envelopes back as they come. frames[i] = {flags, msg}.
function connectStream (sb, path, msg, headers = {}) {
  const u = new URL(envdUrl)
  const mod = u.protocol === 'https:' ? https : http
  const payload = Buffer.from(JSON.stringify(msg))
  const head = Buffer.alloc(5)
  head.writeUInt32BE(payload.length, 1)
  const frames = []
  let status = 0
  let contentType = ''
  const done = new Promise((resolve, reject) => {
    const req = mod.request({
      host: u.hostname,
      port: u.port,
      method: 'POST',
      path,
      headers: Object.assign({
        'Content-Type': 'application/connect+json',
        'Connect-Protocol-Version': '1',
        'E2b-Sandbox-Id': sb.sandboxId,
        'X-Access-Token': sb.envdAccessToken
      }, headers)
    }, res => {
      status = res.statusCode
      contentType = res.headers['content-type']
      let buf = Buffer.alloc(0)
      res.on('data', c => {
        buf = Buffer.concat([buf, c])
        while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
          const n = buf.readUInt32BE(1)
          frames.push({ flags: buf[0], msg: JSON.parse(buf.subarray(5, 5 + n).toString()) })
          buf = buf.subarray(5 + n)
        }
      })
      res.on('end', () => resolve({ status, contentType, frames, rest: buf.length }))
    })
    req.on('error', reject)
    req.end(Buffer.concat([head, payload]))
  })
  return { frames, done }
}
async function unary (sb, path, msg) {
  const r = await raw('POST', path, {
    'Content-Type': 'application/json',
    'E2b-Sandbox-Id': sb.sandboxId,
    'X-Access-Token': sb.envdAccessToken
  }, JSON.stringify(msg))
  return { status: r.status, contentType: r.headers['content-type'], body: JSON.parse(r.body.toString() || 'null') }
}

// The wire as a client without the SDK sees it (what sbx's own client will have to do).
async function wire (sb) {
  const start = connectStream(sb, '/process.Process/Start',
    { process: { cmd: '/bin/sh', args: ['-c', 'sleep 3; echo done'] } }, { 'Keepalive-Ping-Interval': '1' })
  const s = await start.done
  const kinds = s.frames.map(f => f.flags === 2 ? 'end-stream' : Object.keys(f.msg.event)[0])
  const pid = s.frames[0].msg.event.start && s.frames[0].msg.event.start.pid
  expect(s.status === 200 && s.contentType === 'application/connect+json' && s.rest === 0 &&
    kinds[0] === 'start' && Number.isInteger(pid) && kinds.includes('keepalive'),
  'Start: 200, application/connect+json, a start event with the pid, keepalives while silent', show([s.status, s.contentType, kinds]))
  const data = s.frames.find(f => f.flags === 0 && f.msg.event.data)
  expect(data && data.msg.event.data.stdout === Buffer.from('done\n').toString('base64'),
    'Start: output as base64 in data.stdout', show(data))
  const last = s.frames.slice(-2)
  expect(last[0].flags === 0 && JSON.stringify(last[0].msg) === '{"event":{"end":{"exited":true,"status":"exit status 0"}}}' &&
    last[1].flags === 2 && JSON.stringify(last[1].msg) === '{}',
  'Start: the end event (exit code 0 left out), then the end-stream envelope (flag 2, {})', show(last))

  const slow = connectStream(sb, '/process.Process/Start',
    { process: { cmd: '/bin/sh', args: ['-c', 'echo $$ > slow.pid; exec sleep 60'] } }, { 'Connect-Timeout-Ms': '1500' })
  const t = await slow.done
  const tail = t.frames[t.frames.length - 1]
  expect(tail.flags === 2 && tail.msg.error && tail.msg.error.code === 'deadline_exceeded',
    'Start past its Connect-Timeout-Ms: the stream ends with deadline_exceeded', show(t.frames))
  await until(async () => (await sb.commands.run('kill -0 "$(cat slow.pid)" 2>/dev/null || echo gone')).stdout === 'gone\n', 'the timed-out command to die')
  expect(true, 'a command past its Connect-Timeout-Ms is killed')

  const nf = await unary(sb, '/process.Process/SendSignal', { process: { pid: 99999 }, signal: 'SIGNAL_SIGKILL' })
  expect(nf.status === 404 && /^application\/json/.test(nf.contentType) && nf.body.code === 'not_found' &&
    nf.body.message === 'process with pid 99999 not found',
  'a unary error: HTTP 404, JSON {"code":"not_found","message"}', show(nf))

  // StreamInput (a client stream): the SDK does not use it, a client may
  const cat = connectStream(sb, '/process.Process/Start',
    { process: { cmd: 'cat' }, stdin: true, tag: 'cat-tag' }, {})
  await until(() => cat.frames.length > 0, 'the start event')
  const env = m => { const p = Buffer.from(JSON.stringify(m)); const h = Buffer.alloc(5); h.writeUInt32BE(p.length, 1); return Buffer.concat([h, p]) }
  const si = await raw('POST', '/process.Process/StreamInput', {
    'Content-Type': 'application/connect+json',
    'E2b-Sandbox-Id': sb.sandboxId,
    'X-Access-Token': sb.envdAccessToken
  }, Buffer.concat([env({ start: { process: { tag: 'cat-tag' } } }),
    env({ data: { input: { stdin: Buffer.from('streamed\n').toString('base64') } } }),
    env({ keepalive: {} })]))
  await until(() => cat.frames.some(f => f.flags === 0 && f.msg.event.data), 'the echo')
  const echo = cat.frames.find(f => f.flags === 0 && f.msg.event.data)
  expect(si.status === 200 && Buffer.from(echo.msg.event.data.stdout, 'base64').toString() === 'streamed\n',
    'StreamInput (start by tag, data, keepalive) feeds stdin', show([si.status, si.body.toString(), echo]))
  // pids are the sandbox's; SIGTERM reaches the process there, which may handle it
  let said = ''
  const own = await sb.commands.run("trap 'echo caught; exit 0' TERM; echo $$; while :; do sleep 0.1; done",
    { background: true, onStdout: d => { said += d } })
  await until(() => said.includes('\n'), 'the pid line')
  expect(said === own.pid + '\n', 'the pid is the process\'s pid in the sandbox', show([said, own.pid]))
  const term = await unary(sb, '/process.Process/SendSignal', { process: { pid: own.pid }, signal: 'SIGNAL_SIGTERM' })
  const handled = await own.wait()
  expect(term.status === 200 && handled.exitCode === 0 && said.includes('caught'),
    'SIGTERM through SendSignal can be caught by the command', show([term, handled]))

  // v1 create without "secure": no access token, and envd wants none
  const v1 = await fetch(apiUrl + '/sandboxes', {
    method: 'POST',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 60 })
  })
  const v1sb = await v1.json()
  const open = await raw('POST', '/process.Process/List',
    { 'E2b-Sandbox-Id': v1sb.sandboxID, 'Content-Type': 'application/json' }, '{}')
  const del = await fetch(apiUrl + '/sandboxes/' + v1sb.sandboxID, { method: 'DELETE', headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  expect(v1.status === 201 && !('envdAccessToken' in v1sb) && open.status === 200 && del.status === 204,
    'POST /sandboxes without secure: no token, envd open', show([v1.status, v1sb, open.status, String(open.body), del.status]))
  const port = await raw('GET', '/health', { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '8080' })
  expect(port.status === 502 && JSON.parse(port.body).message === 'The sandbox is running but port is not open',
    'another port than envd\'s: 502 port not open', `${port.status} ${port.body}`)

  const killed = await unary(sb, '/process.Process/SendSignal', { process: { tag: 'cat-tag' }, signal: 'SIGNAL_SIGTERM' })
  const c = await cat.done
  const end = c.frames.find(f => f.flags === 0 && f.msg.event.end)
  expect(killed.status === 200 && end && end.msg.event.end.status === 'signal: terminated' && end.msg.event.end.exitCode === -1,
    'SendSignal SIGTERM by tag: the end event says "signal: terminated", exit code -1', show(end))
}

const made = []
async function main () {
  // create: metadata, envs, the info the API gives back
  const sb = await Sandbox.create({ metadata: { suite: 'e2b-fake', run: String(process.pid) }, envs: { FOO: 'foo-value' } })
  made.push(sb)
  expect(/^[a-z0-9]{20}$/.test(sb.sandboxId), 'Sandbox.create gives a sandbox id', sb.sandboxId)
  const info = await sb.getInfo()
  expect(info.state === 'running' && info.templateId === 'base' && info.metadata.suite === 'e2b-fake' &&
    info.envdVersion && info.endAt > info.startedAt, 'getInfo: running, template base, metadata, times', show(info))

  // a command with output on both streams and exit status 3
  const seen = []
  const err = await throws(() => sb.commands.run('echo hi; echo err >&2; exit 3',
    { onStdout: d => seen.push(['out', d]), onStderr: d => seen.push(['err', d]) }))
  expect(err instanceof CommandExitError && err.exitCode === 3 && err.stdout === 'hi\n' &&
    err.stderr === 'err\n' && err.error === 'exit status 3',
  'commands.run: exit 3 is a CommandExitError with stdout, stderr and the status', show(err) + ' ' + show(err && err.result))
  expect(seen.some(([k, d]) => k === 'out' && d === 'hi\n') && seen.some(([k, d]) => k === 'err' && d === 'err\n'),
    'commands.run: onStdout and onStderr get the output', show(seen))

  // streamed as it comes: the command waits for a file the callback makes on its first line
  let lines = ''
  const streamed = await sb.commands.run('echo first; while [ ! -e go ]; do sleep 0.05; done; echo second', {
    timeoutMs: 30000,
    onStdout: async d => {
      lines += d
      if (d.includes('first')) await sb.files.write('go', '')
    }
  })
  expect(streamed.exitCode === 0 && lines === 'first\nsecond\n',
    'output is streamed while the command runs (it waits for what its first line triggers)', show(lines))

  const r = await sb.commands.run('pwd; id -un; echo "$HOME $FOO $BAR"', { envs: { BAR: 'bar-value' } })
  expect(r.stdout === '/home/user\nuser\n/home/user foo-value bar-value\n',
    'commands run as user in /home/user with the sandbox and command environment', show(r.stdout))
  const cwd = await sb.commands.run('pwd', { cwd: '/tmp' })
  expect(cwd.stdout === '/tmp\n', 'cwd outside the workspace', show(cwd.stdout))
  const badCwd = await throws(() => sb.commands.run('pwd', { cwd: '/nonexistent' }))
  expect(badCwd instanceof InvalidArgumentError && /cwd '\/nonexistent' does not exist/.test(badCwd.message),
    'a missing cwd is an InvalidArgumentError', show(badCwd))

  // background command, stdin, list, kill
  let echoed = ''
  const bg = await sb.commands.run("sh -c 'echo $$ > cat.pid; exec cat'", { background: true, stdin: true, onStdout: d => { echoed += d } })
  await sb.commands.sendStdin(bg.pid, 'ping\n')
  await until(() => echoed === 'ping\n', 'the echo of stdin')
  expect(echoed === 'ping\n', 'sendStdin reaches a background command', show(echoed))
  const listed = await sb.commands.list()
  expect(listed.some(p => p.pid === bg.pid && p.cmd === '/bin/bash'), 'commands.list shows it', show(listed))
  expect(await bg.kill() === true, 'kill says it was killed')
  const killed = await throws(() => bg.wait())
  expect(killed instanceof CommandExitError && killed.exitCode === -1 && killed.error === 'signal: killed',
    'a killed command ends with exit code -1, "signal: killed"', show(killed) + ' ' + show(killed && killed.result))
  const dead = await sb.commands.run('kill -0 "$(cat cat.pid)" 2>/dev/null && echo alive || echo dead')
  expect(dead.stdout === 'dead\n', 'the killed command is gone from the sandbox', show(dead.stdout))
  expect(await sb.commands.kill(bg.pid) === false, 'killing it again says not found')

  const eof = await sb.commands.run('cat; echo eof', { background: true, stdin: true })
  await sb.commands.sendStdin(eof.pid, 'x')
  await sb.commands.closeStdin(eof.pid)
  const eofDone = await eof.wait()
  expect(eofDone.stdout === 'xeof\n', 'closeStdin ends the input', show(eofDone.stdout))

  // the same sandbox from a second SDK instance; attach to a running command
  const other = await Sandbox.connect(sb.sandboxId)
  expect(other.sandboxId === sb.sandboxId, 'Sandbox.connect(id) from a second instance')
  const waiter = await sb.commands.run('while [ ! -e stop ]; do sleep 0.05; done; echo bye', { background: true })
  let attached = ''
  const handle = await other.commands.connect(waiter.pid, { onStdout: d => { attached += d } })
  await other.files.write('stop', '')
  const joined = await handle.wait()
  expect(joined.exitCode === 0 && attached === 'bye\n', 'commands.connect(pid) from the second instance gets the output', show(attached))

  if (!quick) await more(sb, other)

  // files, the minimum also run over TLS
  await sb.files.write('notes/a.txt', 'hello file')
  expect(await sb.files.read('notes/a.txt') === 'hello file', 'files.write then files.read (text)')

  expect(await sb.kill() === true, 'kill')
  made.splice(made.indexOf(sb), 1)
  expect(await Sandbox.kill(sb.sandboxId) === false, 'a second kill says not found')
  const gone = await throws(() => Sandbox.getInfo(sb.sandboxId))
  expect(gone instanceof SandboxNotFoundError, 'getInfo after kill: SandboxNotFoundError', show(gone))
  const envdGone = await throws(() => sb.commands.run('true'))
  expect(envdGone instanceof SandboxError || envdGone instanceof TimeoutError,
    'a command on a killed sandbox fails', show(envdGone))
}

async function more (sb, other) {
  await wire(sb)

  // PTY
  let screen = ''
  const term = await sb.pty.create({ cols: 80, rows: 24, onData: d => { screen += new TextDecoder().decode(d) } })
  await sb.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
  await until(() => screen.includes('24 80'), 'stty size 24 80')
  expect(screen.includes('24 80') && !screen.includes('\x1e'), 'pty.create: the terminal has the size asked for', show(screen))
  await sb.pty.resize(term.pid, { cols: 100, rows: 40 })
  await sb.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
  await until(() => screen.includes('40 100'), 'stty size 40 100')
  expect(screen.includes('40 100'), 'pty.resize reaches the terminal', show(screen.slice(-200)))
  await sb.pty.sendInput(term.pid, new TextEncoder().encode('exit 7\n'))
  const ptyEnd = await throws(() => term.wait())
  expect(ptyEnd instanceof CommandExitError && ptyEnd.exitCode === 7, 'the pty shell exits with its status', show(ptyEnd))

  // files
  const bytes = new Uint8Array(256).map((_, i) => i)
  await sb.files.write('bin/all.bytes', bytes)
  const back = await sb.files.read('bin/all.bytes', { format: 'bytes' })
  expect(back.length === 256 && back.every((b, i) => b === i), 'files.read bytes gives back every byte value', show(Array.from(back).slice(0, 8)))
  const big = 'x'.repeat(3 << 20)
  await sb.files.write('/home/user/big.txt', big)
  expect((await sb.files.read('/home/user/big.txt')).length === big.length, 'a 3 MiB file round trip')
  const multi = await sb.files.write([{ path: 'm/one.txt', data: '1' }, { path: '/tmp/two.txt', data: '2' }])
  expect(multi.length === 2 && multi[0].path === '/home/user/m/one.txt' && multi[1].path === '/tmp/two.txt',
    'writing two files at once (one outside the workspace)', show(multi))
  const viaShell = await sb.commands.run('cat m/one.txt /tmp/two.txt')
  expect(viaShell.stdout === '12', 'written files are in the sandbox', show(viaShell.stdout))
  const written = await sb.files.write('meta.txt', 'm', { metadata: { owner: 'suite' } })
  expect(written.path === '/home/user/meta.txt' && written.name === 'meta.txt' && written.type === 'file',
    'files.write returns the entry', show(written))
  expect(await sb.files.makeDir('d1/d2') === true, 'makeDir makes a directory (and its parents)')
  expect(await sb.files.makeDir('d1/d2') === false, 'makeDir of an existing directory says false')
  const entries = await sb.files.list('/home/user', { depth: 2 })
  const names = entries.map(e => e.path)
  expect(names.includes('/home/user/d1') && names.includes('/home/user/d1/d2') && names.includes('/home/user/notes') === false &&
    entries.find(e => e.path === '/home/user/d1').type === 'dir' &&
    entries.find(e => e.path === '/home/user/big.txt').size === big.length,
  'files.list with depth 2: paths, types, sizes', show(names))
  const fi = await sb.files.getInfo('big.txt')
  expect(fi.type === 'file' && fi.permissions === '-rw-r--r--' && fi.owner === 'user' && fi.modifiedTime instanceof Date,
    'files.getInfo', show(fi))
  expect(await sb.files.exists('d1') === true && await sb.files.exists('nope') === false, 'files.exists')
  const moved = await sb.files.rename('meta.txt', 'd1/moved.txt')
  expect(moved.path === '/home/user/d1/moved.txt', 'files.rename', show(moved))
  await sb.files.remove('d1')
  expect(await sb.files.exists('d1') === false, 'files.remove removes a tree')
  const missing = await throws(() => sb.files.read('nope.txt'))
  expect(missing instanceof FileNotFoundError, 'reading a missing file: FileNotFoundError', show(missing))
  const missingList = await throws(() => sb.files.list('nope'))
  expect(missingList instanceof FileNotFoundError, 'listing a missing directory: FileNotFoundError', show(missingList))

  // watching a directory
  await sb.files.makeDir('watched')
  const events = []
  const w = await sb.files.watchDir('watched', e => { events.push(e) })
  await sb.files.write('watched/new.txt', 'w')
  await until(() => events.some(e => e.name === 'new.txt'), 'a watch event')
  await w.stop()
  expect(events.some(e => e.name === 'new.txt' && (e.type === 'create' || e.type === 'write')),
    'watchDir reports a file written', show(events))

  // signed file URLs (a secure sandbox): the URL works without the access token
  const upUrl = new URL(await sb.uploadUrl('signed.txt'))
  const form = '--b\r\nContent-Disposition: form-data; name="file"; filename="signed.txt"\r\n\r\nsigned!\r\n--b--\r\n'
  const up = await raw('POST', upUrl.pathname + upUrl.search,
    { 'E2b-Sandbox-Id': sb.sandboxId, 'Content-Type': 'multipart/form-data; boundary=b' }, form)
  const downUrl = new URL(await sb.downloadUrl('signed.txt'))
  const down = await raw('GET', downUrl.pathname + downUrl.search, { 'E2b-Sandbox-Id': sb.sandboxId })
  expect(up.status === 200 && down.status === 200 && down.body.toString() === 'signed!',
    'uploadUrl and downloadUrl work with their signature alone', `${up.status} ${up.body} ${down.status} ${down.body}`)
  const forged = await raw('GET', '/files?path=signed.txt&signature=v1_forged', { 'E2b-Sandbox-Id': sb.sandboxId })
  expect(forged.status === 401, 'a forged signature is refused', `${forged.status} ${forged.body}`)

  // envd checks the access token of a secure sandbox, and routes by Host too
  const noToken = await raw('POST', '/process.Process/List',
    { 'E2b-Sandbox-Id': sb.sandboxId, 'Content-Type': 'application/json' }, '{}')
  expect(noToken.status === 401, 'envd without the access token: 401', `${noToken.status} ${noToken.body}`)
  const byHost = await raw('GET', '/health', { Host: `49983-${sb.sandboxId}.e2b.test` })
  expect(byHost.status === 204, 'envd routes by a Host of the form 49983-<id>.<domain>', String(byHost.status))
  const asRoot = await throws(() => sb.commands.run('id', { user: 'root' }))
  expect(asRoot instanceof AuthenticationError, 'an unknown user is refused (AuthenticationError)', show(asRoot))

  // timeout, list, metrics
  const before = Date.now()
  await sb.setTimeout(120000)
  const after = await sb.getInfo()
  expect(after.endAt.getTime() >= before + 110000 && after.endAt.getTime() <= Date.now() + 130000,
    'setTimeout moves endAt', show(after.endAt))
  const page = await Sandbox.list({ query: { metadata: { run: String(process.pid) } } }).nextItems()
  expect(page.length === 1 && page[0].sandboxId === sb.sandboxId && page[0].state === 'running',
    'Sandbox.list filtered by metadata', show(page))
  const metrics = await sb.getMetrics()
  expect(metrics.length >= 1 && metrics[0].cpuCount >= 1 && metrics[0].memTotal > 0, 'getMetrics', show(metrics))

  // pause and resume: the workspace survives, processes do not
  await sb.files.write('kept.txt', 'kept')
  expect(await sb.pause() === true, 'pause')
  expect((await Sandbox.getInfo(sb.sandboxId)).state === 'paused', 'getInfo says paused')
  expect(await sb.pause() === false, 'pausing a paused sandbox says false')
  const pausedCmd = await throws(() => sb.commands.run('true'))
  expect(pausedCmd !== null, 'a paused sandbox runs no command', show(pausedCmd))
  const resumed = await Sandbox.connect(sb.sandboxId)
  expect((await resumed.getInfo()).state === 'running' && await resumed.files.read('kept.txt') === 'kept',
    'Sandbox.connect resumes it with its files')

  // snapshots
  const snapName = 'suite-snap-' + process.pid
  const snap = await sb.createSnapshot({ name: snapName })
  expect(snap.names.includes(snapName), 'createSnapshot with a name', show(snap))
  const fromSnap = await Sandbox.create(snapName)
  made.push(fromSnap)
  expect(await fromSnap.files.read('kept.txt') === 'kept', 'a sandbox created from a snapshot has its files')
  const snaps = await Sandbox.listSnapshots().nextItems()
  expect(snaps.some(s => s.snapshotId === snap.snapshotId), 'listSnapshots', show(snaps))
  expect(await fromSnap.kill(), 'kill the snapshot sandbox')
  made.splice(made.indexOf(fromSnap), 1)
  expect(await Sandbox.deleteSnapshot(snap.snapshotId) === true && await Sandbox.deleteSnapshot(snap.snapshotId) === false,
    'deleteSnapshot')
  const byName = await throws(() => Sandbox.create(snapName))
  expect(byName instanceof SandboxError && byName.statusCode === 404, 'a deleted snapshot is gone by its name too', show(byName))

  // a sandbox whose timeout expires is gone
  const short = await Sandbox.create({ timeoutMs: 1000 })
  made.push(short)
  await until(async () => (await throws(() => short.getInfo())) instanceof SandboxNotFoundError, 'expiry', 300)
  made.splice(made.indexOf(short), 1)
  const expiredCmd = await throws(() => short.commands.run('true'))
  expect(expiredCmd instanceof SandboxError || expiredCmd instanceof TimeoutError,
    'an expired sandbox: not found, and its envd answers no more', show(expiredCmd))

  // the service's errors
  const badKey = await throws(() => Sandbox.list({ apiKey: 'e2b_' + '0'.repeat(40) }).nextItems())
  expect(badKey instanceof AuthenticationError && /Invalid API key/.test(badKey.message),
    'a wrong API key: AuthenticationError', show(badKey))
  const unknown = await throws(() => Sandbox.create('no-such-template'))
  expect(unknown instanceof SandboxError && unknown.statusCode === 404 && /template 'no-such-template' not found/.test(unknown.message),
    'an unknown template: 404', show(unknown))
  const s0 = await stats()
  await knobs({ rate_limit_next: 1, retry_after: 1 })
  await Sandbox.list().nextItems()
  const s1 = await stats()
  expect(s1.rate_limited === s0.rate_limited + 1, 'a 429 with Retry-After is retried by the SDK', show([s0, s1]))
  await knobs({ rate_limit_next: 10, retry_after: 1 })
  const limited = await throws(() => Sandbox.list({ retries: 1 }).nextItems())
  await knobs({ rate_limit_next: 0 })
  expect(limited instanceof RateLimitError, 'past its retries: RateLimitError', show(limited))
  await knobs({ max_sandboxes: 1 })
  const quota = await throws(() => Sandbox.create())
  await knobs({ max_sandboxes: 0 })
  expect(quota instanceof RateLimitError && /maximum number of concurrent E2B sandboxes/.test(quota.message),
    'over the concurrency quota: RateLimitError', show(quota))
  void other
}

// --leave: a sandbox with a command running, left for the fake's shutdown to remove.
async function leave () {
  const sb = await Sandbox.create({ timeoutMs: 600000 })
  const h = await sb.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  const list = await sb.commands.list()
  expect(list.some(p => p.pid === h.pid), 'a sandbox left with a command running', show(list))
  await h.disconnect()
}

try {
  if (process.argv.includes('--leave')) await leave()
  else await main()
} catch (e) {
  report(false, 'the SDK run ended early', (e && e.stack) || String(e))
} finally {
  for (const s of made) await s.kill().catch(() => {})
}
// Streams the SDK keeps open (a command without a timeout) must not keep node running.
process.exit(0)
