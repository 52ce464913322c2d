// Loads @cloudflare/sandbox's bridge in node: its module imports `cloudflare:workers`, which only
// the Workers runtime has. This hook answers that import with the few names the bridge's module
// needs to load (classes to extend, an env, no tracing); nothing of the Workers runtime runs.
// It also lets the bundler-style imports of @cloudflare/containers (no '.js') resolve.
import { register } from 'node:module';

const stub = `
export class DurableObject { constructor(ctx, env) { this.ctx = ctx; this.env = env; } }
export class WorkerEntrypoint { constructor(ctx, env) { this.ctx = ctx; this.env = env; } }
export class RpcTarget {}
export const env = { Sandbox: {}, WarmPool: {}, SANDBOX_API_KEY: 'stub' };
export const tracing = undefined;
`;
const hooks = `
export async function resolve(specifier, context, next) {
  if (specifier === 'cloudflare:workers')
    return { url: 'data:text/javascript,' + encodeURIComponent(${JSON.stringify(stub)}), shortCircuit: true };
  try {
    return await next(specifier, context);
  } catch (e) {
    // @cloudflare/containers imports its own files without the extension, as bundlers allow.
    if (e.code !== 'ERR_MODULE_NOT_FOUND' || !specifier.startsWith('.') || specifier.endsWith('.js')) throw e;
    return next(specifier + '.js', context);
  }
}`;
register('data:text/javascript,' + encodeURIComponent(hooks));
