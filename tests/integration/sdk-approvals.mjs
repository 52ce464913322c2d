// The reference JS SDK's side of tests/integration/4133-approval-sdk.sh: one approval scenario
// with @openai/agents against the scripted model server at OPENAI_BASE_URL, the same turns sbx
// gets. The agent has one function tool, exec_command {cmd}, whose approval rule is the one the
// sbx agent file has (every call, or only `rm ...` in "same-turn"). Each phase is a run (the
// first from the prompt, the next ones from the saved state, read back from its string as a new
// process would); between phases the scenario's decisions are applied to the interruptions.
// Prints one JSON line: {"phases": [{"ran": [call ids], "waiting": [call ids]}], "final": text}.
// usage: node sdk-approvals.mjs SCENARIO   (run from where @openai/agents is installed)
import { Agent, RunState, run, setTracingDisabled, tool } from '@openai/agents';

setTracingDisabled(true);
const scenario = process.argv[2];
let ran = [];
const execCommand = tool({
  name: 'exec_command',
  description: 'Runs a shell command.',
  parameters: {
    type: 'object',
    properties: { cmd: { type: 'string' } },
    required: ['cmd'],
    additionalProperties: false,
  },
  strict: true,
  needsApproval: async (_ctx, input) =>
    scenario === 'same-turn' ? input.cmd.startsWith('rm ') : true,
  execute: async (input, _ctx, details) => {
    ran.push(details?.toolCall?.callId ?? '?');
    return `ran ${input.cmd}`;
  },
});
const agent = new Agent({
  name: 'Worker',
  model: 'gpt-4.1',
  instructions: 'Work.',
  tools: [execCommand],
});

// What each scenario answers to the waiting calls of a phase.
const decide = {
  'reject-reason': (st, item) => st.reject(item, { message: 'do not delete files' }),
  'reject-plain': (st, item) => st.reject(item),
  always: (st, item) => st.approve(item, { alwaysApprove: true }),
  'always-reject': (st, item) => st.reject(item, { alwaysReject: true, message: 'never' }),
  'same-turn': (st, item) => st.approve(item),
};

const phases = [];
let result = await run(agent, 'go', { maxTurns: 10 });
for (let i = 0; i < 5; i++) {
  const waiting = result.interruptions.map((it) => it.rawItem.callId);
  phases.push({ ran, waiting });
  ran = [];
  if (!waiting.length) break;
  const state = await RunState.fromString(agent, result.state.toString());
  for (const item of state.getInterruptions()) decide[scenario](state, item);
  result = await run(agent, state, { maxTurns: 10 });
}
console.log(JSON.stringify({ phases, final: result.finalOutput ?? null }));
process.exit(0);
