# settings_agent FILE: an agent file with every ModelSettings field of the Agents SDK (Python
# model_settings.py, JS modelSettings.ts), shared by 3006 (the mapping) and 3007 (the schemas).
settings_agent() {
    cat >"$1" <<'YAML'
name: Settings
instructions: Answer.
tools: [calculator]
model_settings:
  temperature: 0.2
  top_p: 0.9
  frequency_penalty: 0.1
  presence_penalty: 0.2
  tool_choice: calculator
  parallel_tool_calls: false
  truncation: auto
  max_tokens: 2000
  reasoning: {effort: high, summary: auto}
  verbosity: low
  metadata: {team: sbx}
  store: false
  prompt_cache_retention: 24h
  include_usage: true
  response_include: [reasoning.encrypted_content]
  top_logprobs: 3
  extra_query: {api-version: "2025-01-01"}
  extra_body: {service_tier: auto}
  extra_headers: {X-Team: sbx}
  extra_args: {safety_identifier: user-1}
  retry: {max_retries: 1, backoff: {initial_delay: 0.1, max_delay: 1}}
  context_management: [{type: compaction, compact_threshold: 100000}]
  prompt_cache_options: {mode: explicit, ttl: 30m}
  preserve_raw_usage: true
  timeout: 60
YAML
}
