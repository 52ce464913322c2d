// The reference JS SDK's persist of a workspace of NFILES files of 4096 bytes, as bench-snapshot
// writes them: "distinct" gives each file its own content ("file N\n", a NUL, then 'x' to 4096
// bytes), "same" gives every file 4096 'x'. The workspace lives under TMPDIR (set it to pick the
// file system). Prints one JSON line: persist_ms (persistWorkspace alone), persist_bytes.
//   TMPDIR=DIR node peer-persist.mjs NFILES distinct|same
import { Manifest, file, dir } from '@openai/agents/sandbox';
import { UnixLocalSandboxClient } from '@openai/agents/sandbox/local';
import { performance } from 'node:perf_hooks';

const nfiles = Number(process.argv[2] ?? 2000);
const distinct = (process.argv[3] ?? 'distinct') === 'distinct';
const entries = {};
const fill = 'x'.repeat(4096);
for (let i = 0; i < nfiles; i++) {
  const head = distinct ? `file ${i}\n\0` : '';
  entries[`data/f${i}.txt`] = file({ content: head + fill.slice(head.length) });
}
entries['out'] = dir({});
const client = new UnixLocalSandboxClient();
const session = await client.create({ manifest: new Manifest({ entries }) });
if (session.start) await session.start();
const t0 = performance.now();
const tar = await session.persistWorkspace();
const t1 = performance.now();
await session.close?.();
console.log(JSON.stringify({ persist_ms: t1 - t0, persist_bytes: tar ? tar.byteLength : null }));
