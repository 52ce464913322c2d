// The fake's field tables (fake-e2b.py --schema, on stdin) against what E2B's npm SDK ships:
// the protobuf descriptors of envd's process and filesystem services (embedded in
// dist/index.js as serialized FileDescriptorProtos) and the OpenAPI types of the control plane
// and of envd's REST API (dist/index.d.ts). E2B_SDK_DIR names the directory whose node_modules
// holds the SDK. Prints one JSON line per check: {"ok", "name", "diag"}.
import { createRequire } from 'node:module'
import fs from 'node:fs'

const sdkDir = process.env.E2B_SDK_DIR + '/node_modules/e2b/dist/'
const sdkRequire = createRequire(sdkDir)
const { fileDesc } = sdkRequire('@bufbuild/protobuf/codegenv2')
const wkt = sdkRequire('@bufbuild/protobuf/wkt')
const { ScalarType } = sdkRequire('@bufbuild/protobuf')

const fake = JSON.parse(fs.readFileSync(0, 'utf8'))

function report (ok, name, diag) {
  process.stdout.write(JSON.stringify({ ok, name, diag: diag || '' }) + '\n')
}

// --- protobuf ------------------------------------------------------------------------------
const js = fs.readFileSync(sdkDir + 'index.js', 'utf8')
const blobs = [...js.matchAll(/fileDesc\)\("([A-Za-z0-9+/=]+)"/g)].map(m => m[1])
const messages = new Map()
const enums = new Map()
function addMessages (list) {
  for (const m of list) {
    messages.set(m.typeName, m)
    for (const e of m.nestedEnums) enums.set(e.typeName, e)
    addMessages(m.nestedMessages)
  }
}
const files = blobs.map(b => fileDesc(b, [wkt.file_google_protobuf_timestamp]))
for (const f of files) {
  addMessages(f.messages)
  for (const e of f.enums) enums.set(e.typeName, e)
}
report(files.some(f => f.name === 'process/process') && files.some(f => f.name === 'filesystem/filesystem'),
  'the SDK embeds the descriptors of process.proto and filesystem.proto', files.map(f => f.name).join(' '))

function scalarKind (s) {
  return ScalarType[s].toLowerCase()
}
function kindOf (field) {
  let k
  switch (field.fieldKind) {
    case 'scalar': k = scalarKind(field.scalar); break
    case 'enum': k = 'enum:' + field.enum.typeName; break
    case 'message': k = 'msg:' + field.message.typeName; break
    case 'list':
      k = 'repeated:' + (field.listKind === 'scalar' ? scalarKind(field.scalar)
        : field.listKind === 'enum' ? 'enum:' + field.enum.typeName : 'msg:' + field.message.typeName)
      break
    case 'map':
      k = 'map:' + scalarKind(field.mapKey) + ':' + (field.mapKind === 'scalar' ? scalarKind(field.scalar)
        : field.mapKind === 'enum' ? 'enum:' + field.enum.typeName : 'msg:' + field.message.typeName)
      break
  }
  return field.proto.proto3Optional ? 'optional:' + k : k
}

for (const [type, fields] of Object.entries(fake.proto)) {
  const desc = messages.get(type)
  if (!desc) {
    report(false, `${type}: a message of the SDK's descriptors`, 'no such message')
    continue
  }
  const want = new Map(desc.fields.map(f => [f.jsonName, kindOf(f)]))
  const bad = []
  for (const [name, kind] of Object.entries(fields)) {
    if (!want.has(name)) bad.push(`${name}: no such field (fields: ${[...want.keys()].join(', ') || 'none'})`)
    else if (want.get(name) !== kind) bad.push(`${name}: the fake says ${kind}, the descriptor ${want.get(name)}`)
  }
  for (const name of want.keys()) {
    if (!(name in fields)) bad.push(`${name} (${want.get(name)}): in the descriptor, not in the fake's table`)
  }
  report(bad.length === 0, `${type}: field names and kinds`, bad.join('; '))
}
for (const [type, values] of Object.entries(fake.enums)) {
  const desc = enums.get(type)
  const names = desc ? desc.values.map(v => v.name) : []
  const bad = values.filter(v => !names.includes(v))
  report(!!desc && bad.length === 0, `${type}: the enum values the fake writes`, desc ? bad.join(', ') : 'no such enum')
}

// --- OpenAPI types ---------------------------------------------------------------------------
// openapi-typescript's output: "interface components {" > "  schemas: {" > "    Name: {" with
// one field a line ("      name?: type;") at six spaces.
const dts = fs.readFileSync(sdkDir + 'index.d.ts', 'utf8').split('\n')
function schemaBlocks () {
  const blocks = []
  for (let i = 0; i < dts.length; i++) {
    if (!/^interface components(\$\d+)? \{$/.test(dts[i]) || dts[i + 1] !== '  schemas: {') continue
    const schemas = new Map()
    let current = null
    for (let j = i + 2; j < dts.length && dts[j] !== '  };'; j++) {
      const line = dts[j]
      let m
      if ((m = /^ {4}(\w+): (\{|.*;)$/.exec(line))) {
        current = m[2] === '{' ? [] : null
        schemas.set(m[1], current)
      } else if (current && (m = /^ {6}"?([\w-]+)"?\??: /.exec(line))) {
        current.push(m[1])
      }
    }
    blocks.push(schemas)
  }
  return blocks
}
const blocks = schemaBlocks()
const apiSchemas = blocks.find(b => b.has('NewSandboxV2'))
const envdSchemas = blocks.find(b => b.has('EntryInfo') && b.has('ComposeRequest'))
report(!!(apiSchemas && envdSchemas), "the SDK's types hold the API's and envd's OpenAPI schemas",
  `${blocks.length} schema blocks`)
for (const [api, schemas] of [['api', apiSchemas], ['envd', envdSchemas]]) {
  if (!schemas) continue
  for (const [name, fields] of Object.entries(fake.rest[api])) {
    const have = schemas.get(name)
    if (!have) {
      report(false, `${api} ${name}: a schema of the SDK's types`, 'no such schema')
      continue
    }
    const bad = fields.filter(f => !have.includes(f)).map(f => `${f}: no such field`)
    for (const f of have) if (!fields.includes(f)) bad.push(`${f}: in the schema, not in the fake's table`)
    report(bad.length === 0, `${api} ${name}: field names`, bad.join('; ') + ` (schema: ${have.join(', ')})`)
  }
}
