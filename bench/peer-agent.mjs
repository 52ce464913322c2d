// The reference JS SDK's side of the agent-run rows of bench/bench-peer.sh: one SandboxAgent
// run (UnixLocalSandboxClient, default capabilities) with an NFILES-file manifest against the
// scripted model server at OPENAI_BASE_URL, at most MAXTURNS turns. Prints {"run_ms": ...}.
// Runs from the directory where @openai/agents is installed (scripts/bench copies it there).
// usage: node peer-agent.mjs NFILES MAXTURNS
import { run, setTracingDisabled } from '@openai/agents';
import { Capabilities, Manifest, SandboxAgent, file } from '@openai/agents/sandbox';
import { UnixLocalSandboxClient } from '@openai/agents/sandbox/local';
import { performance } from 'node:perf_hooks';

setTracingDisabled(true);
const nfiles = Number(process.argv[2] ?? 200);
const maxTurns = Number(process.argv[3] ?? 30);
const entries = {};
const content = 'x'.repeat(4096);
for (let i = 0; i < nfiles; i++) entries[`data/f${i}.txt`] = file({ content });
const agent = new SandboxAgent({
  name: 'bench',
  model: 'mock-model',
  instructions: 'bench',
  defaultManifest: new Manifest({ entries }),
  capabilities: Capabilities.default(),
});
const start = performance.now();
const result = await run(agent, 'run the steps', {
  maxTurns,
  sandbox: { client: new UnixLocalSandboxClient() },
});
const end = performance.now();
console.log(JSON.stringify({ run_ms: end - start, final: result.finalOutput }));
