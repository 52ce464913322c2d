// The fake's request fields (fake-runloop.py --schema, on stdin) against the type declarations
// of Runloop's npm client (RUNLOOP_SDK_DIR): every field the fake knows must be declared by the
// interface it names, in resources/devboxes/*.d.ts. One JSON result line per check, as
// sdk-test.mjs prints them.
import fs from 'node:fs'
import path from 'node:path'

const root = path.join(process.env.RUNLOOP_SDK_DIR, 'node_modules/@runloop/api-client')
const dir = path.join(root, 'resources/devboxes')
const text = fs.readdirSync(dir).filter(f => f.endsWith('.d.ts'))
  .map(f => fs.readFileSync(path.join(dir, f), 'utf8'))
  .concat([fs.readFileSync(path.join(root, 'pagination.d.ts'), 'utf8')]).join('\n')

// The top-level field names of `export interface NAME [extends BASE] { ... }` (four-space
// indent), with BASE's.
function fields (name) {
  const m0 = new RegExp(`export interface ${name}(?: extends (\\w+))? \\{`).exec(text)
  if (!m0) return null
  const out = m0[1] ? (fields(m0[1]) || new Set()) : new Set()
  for (const line of text.slice(m0.index).split('\n').slice(1)) {
    if (line.startsWith('}')) break
    const m = /^ {4}([a-z_]+)\??:/.exec(line)
    if (m) out.add(m[1])
  }
  return out
}

function report (ok, name, diag) {
  process.stdout.write(JSON.stringify({ ok, name, diag: diag || '' }) + '\n')
}

const schema = JSON.parse(fs.readFileSync(0, 'utf8'))
for (const kind of ['body', 'query']) {
  for (const [op, [iface, names]] of Object.entries(schema[kind])) {
    const declared = fields(iface)
    if (!declared) {
      report(false, `${kind} of ${op}: the client declares ${iface}`, 'no such interface')
      continue
    }
    const missing = names.filter(n => !declared.has(n))
    report(missing.length === 0, `${kind} of ${op}: every field is one of ${iface}'s`,
      `not declared: ${missing.join(', ')}; declared: ${[...declared].join(', ')}`)
  }
}
