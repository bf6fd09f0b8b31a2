// The resolve hook of loaded-packages.ts: tells the main thread every URL resolved.
import type { MessagePort } from "node:worker_threads";

let port: MessagePort | undefined;
export function initialize(data: { port: MessagePort }): void {
  port = data.port;
}
export async function resolve(specifier: string, context: unknown, next: (s: string, c: unknown) => Promise<{ url: string }>): Promise<{ url: string }> {
  const r = await next(specifier, context);
  port?.postMessage(r.url);
  return r;
}
