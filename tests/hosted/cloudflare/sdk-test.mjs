// The fake Sandbox Bridge held to @cloudflare/sandbox (0001-cloudflare-sdk.sh runs it).
//
// The npm package is a Workers-runtime library: it has no HTTP client of the bridge. What it
// does ship is the bridge itself (@cloudflare/sandbox/bridge: the Hono app a deployed worker
// runs, its routes, checks and OpenAPI document). So this script loads that bridge in node
// (workers-stub.mjs answers its `cloudflare:workers` import) and holds the fake to it twice:
//  1. every request the bridge answers before it needs a container (auth, the id's format,
//     creating an id, unknown routes) goes to both, and the answers must be the same;
//  2. the fake is driven by the bridge's own OpenAPI document (each operation's path and
//     method taken from it, each answer's status one it documents, each exec event one it
//     names): create, a command whose output must stream, a file written and read back, the
//     workspace persisted and hydrated, delete.
// CLOUDFLARE_SDK_DIR names the directory whose node_modules holds the package;
// CLOUDFLARE_SANDBOX_WORKER_URL and CLOUDFLARE_SANDBOX_API_KEY point at the fake. One JSON line
// per check: {"ok": true|false, "name": "...", "diag": "..."}.
const sdkDir = process.env.CLOUDFLARE_SDK_DIR
const worker = process.env.CLOUDFLARE_SANDBOX_WORKER_URL.replace(/\/$/, '')
const key = process.env.CLOUDFLARE_SANDBOX_API_KEY

function report (ok, name, diag) {
  process.stdout.write(JSON.stringify({ ok, name, diag: diag || '' }) + '\n')
}
function expect (cond, name, diag) {
  report(!!cond, name, cond ? '' : diag)
  return !!cond
}
const auth = { Authorization: 'Bearer ' + key }

// The bridge, as a worker built with it: bridge(worker, config).fetch(request, env, ctx).
const bridgeMod = await import(sdkDir + '/node_modules/@cloudflare/sandbox/dist/bridge/index.js')
const real = bridgeMod.bridge({ fetch: async () => new Response('app') }, {})
const realEnv = { SANDBOX_API_KEY: key, Sandbox: {}, WarmPool: {} }
const realFetch = (path, init) => real.fetch(new Request('http://bridge' + path, init), realEnv, {})

let r = await realFetch('/v1/openapi.json', { headers: auth })
const spec = await r.json()
expect(r.status === 200 && spec.paths, 'the bridge serves its OpenAPI document', 'HTTP ' + r.status)

// 1. The same answers where the bridge needs no container.
async function both (name, path, init, check) {
  const a = await realFetch(path, init)
  const b = await fetch(worker + path, init)
  const ta = await a.text()
  const tb = await b.text()
  if (check) {
    expect(a.status === b.status && check(ta) && check(tb), name,
      `bridge: ${a.status} ${ta}\nfake: ${b.status} ${tb}`)
  } else {
    expect(a.status === b.status && ta === tb, name, `bridge: ${a.status} ${ta}\nfake: ${b.status} ${tb}`)
  }
}
const idShape = t => /^\{"id":"[a-z2-7]{26}"\}$/.test(t)
await both('create: an id of the bridge\'s shape', '/v1/sandbox', { method: 'POST', headers: auth }, idShape)
await both('create with a wrong key: 401 unauthorized', '/v1/sandbox', { method: 'POST', headers: { Authorization: 'Bearer nope' } })
await both('create without a key: 401', '/v1/sandbox', { method: 'POST' })
await both('a malformed sandbox id: 400 before auth', '/v1/sandbox/Not_An-Id/exec', { method: 'POST', body: '{}' })
await both('exec with a wrong key: 401', '/v1/sandbox/abcdef/exec', { method: 'POST', headers: { Authorization: 'Bearer nope' }, body: '{"argv":["true"]}' })
await both('file with a lowercase "bearer": 401 unless the key matches', '/v1/sandbox/abcdef/file/workspace/x', { headers: { Authorization: 'bearer nope' } })

// 2. The fake driven by the document.
function op (method, path) {
  const o = spec.paths[path]?.[method]
  if (!o) throw new Error(`the bridge documents no ${method.toUpperCase()} ${path}`)
  return o
}
function documented (method, path, status) {
  return Object.keys(op(method, path).responses || {}).includes(String(status))
}
async function call (method, path, params, init = {}, query = '') {
  op(method, path)
  let url = path
  for (const [k, v] of Object.entries(params)) url = url.replace(`{${k}}`, v)
  url += query
  const res = await fetch(worker + url, { method: method.toUpperCase(), ...init, headers: { ...auth, ...(init.headers || {}) } })
  expect(documented(method, path, res.status), `${method.toUpperCase()} ${path} answers a documented status`,
    `HTTP ${res.status}, documented: ${Object.keys(op(method, path).responses || {})}`)
  return res
}

let res = await call('post', '/v1/sandbox', {})
const id = (await res.json()).id
expect(/^[a-z2-7]+$/.test(id || ''), 'create gives an id', String(id))

// A command whose output must arrive before it ends: it prints, then waits for a file that this
// script writes only once the first output came through the stream.
const execPath = Object.keys(spec.paths).find(p => p.endsWith('/exec'))
const events = op('post', execPath).responses['200'].description
const named = ['stdout', 'stderr', 'exit', 'error'].filter(e => events.includes('`' + e + '`') || events.includes(`event: ${e}`))
expect(named.length === 4, 'the document names the exec events', events)
res = await call('post', execPath, { id }, {
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ argv: ['sh', '-c', 'echo first; echo oops >&2; i=0; while [ ! -e /workspace/go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo second; exit 3'], timeout_ms: 120000 })
})
expect((res.headers.get('content-type') || '').startsWith('text/event-stream'), 'exec answers text/event-stream', res.headers.get('content-type'))
const dec = new TextDecoder()
let buf = ''
const got = { stdout: '', stderr: '' }
let exit = null
let unknown = []
let sentGo = false
let streamed = false
for await (const chunk of res.body) {
  buf += dec.decode(chunk, { stream: true })
  let i
  while ((i = buf.indexOf('\n\n')) >= 0) {
    const block = buf.slice(0, i)
    buf = buf.slice(i + 2)
    let ev = 'message'
    const data = []
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) ev = line.slice(6).trim()
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
    }
    if (!named.includes(ev)) unknown.push(ev)
    if (ev === 'stdout' || ev === 'stderr') got[ev] += Buffer.from(data.join('\n'), 'base64').toString()
    if (ev === 'exit') exit = JSON.parse(data.join('\n'))
    if (ev === 'error') exit = { error: JSON.parse(data.join('\n')) }
  }
  if (!sentGo && got.stdout.includes('first')) {
    sentGo = true
    streamed = !got.stdout.includes('second')
    const w = await call('put', Object.keys(spec.paths).find(p => p.includes('/file/')), { id, path: 'workspace/go' }, { body: 'go' })
    expect(w.status === 200, 'a file written while the command runs', 'HTTP ' + w.status)
  }
}
expect(streamed, 'stdout streams: the first line came before the command could finish', JSON.stringify(got))
expect(got.stdout === 'first\nsecond\n' && got.stderr === 'oops\n', 'stdout and stderr decoded from base64', JSON.stringify(got))
expect(exit && exit.exit_code === 3, 'the exit event carries exit_code', JSON.stringify(exit))
expect(unknown.length === 0, 'every event is one the document names', unknown.join(','))

const filePath = Object.keys(spec.paths).find(p => p.includes('/file/'))
const bytes = Buffer.from(Array.from({ length: 70000 }, (_, i) => (i * 7) & 255))
res = await call('put', filePath, { id, path: 'workspace/dir/../data.bin' }, { headers: { 'Content-Type': 'application/octet-stream' }, body: bytes })
expect(res.status === 200 && (await res.json()).ok === true, 'PUT file: {"ok":true}', 'HTTP ' + res.status)
res = await call('get', filePath, { id, path: 'workspace/data.bin' })
const back = Buffer.from(await res.arrayBuffer())
expect(res.status === 200 && back.equals(bytes), 'GET file: the same bytes back', `HTTP ${res.status}, ${back.length} bytes`)
res = await call('get', filePath, { id, path: 'workspace/nothing-here' })
const nf = await res.json()
expect(res.status === 404 && nf.code === 'workspace_read_not_found', 'a missing file: 404 workspace_read_not_found', JSON.stringify(nf))
res = await call('get', filePath, { id, path: 'etc/passwd' })
expect(res.status === 403, 'a path outside /workspace: 403', 'HTTP ' + res.status)

const persistPath = Object.keys(spec.paths).find(p => p.endsWith('/persist'))
const hydratePath = Object.keys(spec.paths).find(p => p.endsWith('/hydrate'))
expect(op('post', persistPath).parameters?.some(p => p.name === 'excludes'), 'the document names persist\'s excludes', '')
res = await call('post', persistPath, { id }, {}, '?excludes=go')
const tar = Buffer.from(await res.arrayBuffer())
const names = []
for (let o = 0; o + 512 <= tar.length;) {
  const name = tar.subarray(o, o + 100).toString().replace(/\0.*$/s, '')
  if (!name) break
  names.push(name)
  const size = parseInt(tar.subarray(o + 124, o + 136).toString().replace(/\0.*$/s, '').trim() || '0', 8)
  o += 512 + Math.ceil(size / 512) * 512
}
expect(res.status === 200 && names.includes('./data.bin') && !names.includes('./go'), 'persist: a tar of /workspace without what excludes names', names.join(' '))

res = await call('post', '/v1/sandbox', {})
const id2 = (await res.json()).id
res = await call('post', hydratePath, { id: id2 }, { headers: { 'Content-Type': 'application/octet-stream' }, body: tar })
expect(res.status === 200, 'hydrate: the tar into another sandbox', 'HTTP ' + res.status)
res = await call('get', filePath, { id: id2, path: 'workspace/data.bin' })
expect(Buffer.from(await res.arrayBuffer()).equals(bytes), 'the hydrated sandbox has the file', '')
res = await call('get', Object.keys(spec.paths).find(p => p.endsWith('/running')), { id: id2 })
expect((await res.json()).running === true, 'running: true', '')

// A tunnel to a port something listens on, as the document describes it; the same again.
const tunnelPath = Object.keys(spec.paths).find(p => p.includes('/tunnel/'))
const tschema = spec.components.schemas.Tunnel
res = await call('post', execPath, { id: id2 }, {
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ argv: ['sh', '-c', 'mkdir -p /workspace/www && echo tunnelled > /workspace/www/t.txt && (cd /workspace/www && exec python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &) ; i=0; while [ $i -lt 100 ]; do python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8765))" 2>/dev/null && exit 0; i=$((i+1)); sleep 0.1; done; exit 1'] })
})
const started = await res.text()
expect(started.includes('"exit_code":0'), 'a server listens in the sandbox', started)
res = await call('post', tunnelPath, { id: id2, port: '8765' })
const tunnel = await res.json()
expect(res.status === 200 && tschema.required.every(k => k in tunnel) && tunnel.port === 8765,
  'POST tunnel: the fields the document requires', JSON.stringify(tunnel))
res = await call('post', tunnelPath, { id: id2, port: '8765' })
expect((await res.json()).url === tunnel.url, 'the same port: the same tunnel', '')
if (/^http:\/\/127\.0\.0\.1:/.test(tunnel.url || '')) {
  const page = await fetch(tunnel.url + '/t.txt')
  expect(page.status === 200 && (await page.text()) === 'tunnelled\n', 'the tunnel reaches the port', '')
}
res = await call('post', tunnelPath, { id: id2, port: '3000' })
expect(res.status === 400, 'port 3000 (the container\'s own) is refused', 'HTTP ' + res.status)
res = await call('delete', tunnelPath, { id: id2, port: '8765' })
expect(res.status === 204, 'DELETE tunnel: 204', 'HTTP ' + res.status)

for (const sid of [id, id2]) {
  res = await call('delete', '/v1/sandbox/{id}', { id: sid })
  expect(res.status === 204, 'delete: 204', 'HTTP ' + res.status)
}
