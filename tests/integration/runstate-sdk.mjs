// The JS Agents SDK's side of 4108-state-sdk.sh, run against the fake model server at
// OPENAI_BASE_URL with the SDK installed by npm-lib.sh (AGENTS_JS_DIR):
//   node runstate-sdk.mjs plain OUT            agent 'Guarded', whose exec_command function tool
//                                              needs approval, runs to its interruption; the
//                                              RunState goes to OUT
//   node runstate-sdk.mjs sandbox OUT WSDIR    SandboxAgent 'Builder' (shell capability, unix
//                                              local client, workspaces under WSDIR) whose
//                                              exec_command needs approval for "rm ..."
//   node runstate-sdk.mjs resume FILE          agent 'Calc' (a calculator tool that needs
//                                              approval) loads FILE, approves every
//                                              interruption and runs to the end
// Each prints one JSON line.
import { createRequire } from 'node:module';
import fs from 'node:fs';

const require = createRequire(process.env.AGENTS_JS_DIR + '/node_modules/');
const { Agent, run, tool, RunState, setTracingDisabled } = require('@openai/agents');
const { z } = require('zod');
setTracingDisabled(true);

const [mode, file, wsDir] = process.argv.slice(2);

if (mode === 'plain') {
  const execTool = tool({
    name: 'exec_command', description: 'Runs a command.',
    parameters: z.object({ cmd: z.string() }), needsApproval: true,
    execute: async ({ cmd }) => `ran ${cmd}`,
  });
  const agent = new Agent({ name: 'Guarded', instructions: 'Do it.', model: 'gpt-4.1', tools: [execTool] });
  const r = await run(agent, 'delete hello');
  fs.writeFileSync(file, r.state.toString());
  console.log(JSON.stringify({ interruptions: r.interruptions.map((i) => i.rawItem.callId) }));
} else if (mode === 'sandbox') {
  const { SandboxAgent, Manifest, file: entry, shell } = require('@openai/agents/sandbox');
  const { UnixLocalSandboxClient } = require('@openai/agents/sandbox/local');
  const guarded = (tools) => tools.map((t) => t.name !== 'exec_command' ? t : {
    ...t, needsApproval: async (_ctx, input) => String(input?.cmd ?? '').startsWith('rm ') });
  const agent = new SandboxAgent({
    name: 'Builder', model: 'gpt-4.1', instructions: 'Build.',
    defaultManifest: new Manifest({ entries: { 'hello.txt': entry({ content: 'hi\n' }) } }),
    capabilities: [shell({ configureTools: guarded })],
  });
  const client = new UnixLocalSandboxClient({ snapshot: { type: 'local' }, workspaceBaseDir: wsDir });
  const r = await run(agent, 'make a file, then remove hello.txt', { sandbox: { client } });
  fs.writeFileSync(file, r.state.toString());
  console.log(JSON.stringify({ interruptions: r.interruptions.map((i) => i.rawItem.callId) }));
} else if (mode === 'resume') {
  const calculator = tool({
    name: 'calculator', description: 'Evaluates an expression.',
    parameters: z.object({ expression: z.string() }), needsApproval: true,
    execute: async ({ expression }) => `js computed ${expression}`,
  });
  const agent = new Agent({ name: 'Calc', instructions: 'Compute.', model: 'gpt-4.1', tools: [calculator] });
  const st = await RunState.fromString(agent, fs.readFileSync(file, 'utf8'));
  const pending = st.getInterruptions();
  for (const i of pending) st.approve(i);
  const r = await run(agent, st);
  console.log(JSON.stringify({ interruptions: pending.map((i) => i.rawItem.callId), final: r.finalOutput }));
} else {
  throw new Error(`unknown mode ${mode}`);
}
