import { ApiError } from "./http.js";
import { explorerFilter, type ExplorerNode } from "./explorer.js";

// The registry's HTTP API (registry config http:) as the console asks it: the fleet explorer's
// nodes for a filter (briefly reused: paging and counts ask repeatedly), one node, and its health.

/** How long the registry's answer to one filter is reused. */
const CACHE_MS = 2000;
const PROBE_TIMEOUT_MS = 2500;

export class RegistryHttp {
  private readonly cache = new Map<string, { at: number; nodes: Promise<ExplorerNode[]> }>();

  constructor(
    readonly url: string,
    private readonly token: string | undefined,
  ) {}

  private async get(path: string): Promise<Response> {
    try {
      return await fetch(new URL(path, this.url), { signal: AbortSignal.timeout(10_000), headers: this.token ? { authorization: `Bearer ${this.token}` } : {} });
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
      throw new ApiError(503, "registry", `the registry at ${this.url} is unreachable (${cause}); the explorer answers again once it is back`);
    }
  }

  /** Registry nodes matching a filter box's text. */
  nodes(filterText: string): Promise<ExplorerNode[]> {
    const now = Date.now();
    const hit = this.cache.get(filterText);
    if (hit && now - hit.at < CACHE_MS) return hit.nodes;
    for (const [k, v] of this.cache) if (now - v.at >= CACHE_MS) this.cache.delete(k);
    const nodes = (async () => {
      explorerFilter(filterText); // parsed here first: errors point at their column
      const q = filterText.trim() ? `?select=${encodeURIComponent(filterText.trim())}` : "";
      const res = await this.get(`/nodes${q}`);
      const body = (await res.json().catch(() => ({}))) as { nodes?: ExplorerNode[]; message?: string };
      if (res.status === 400) throw new ApiError(400, "filter", body.message ?? "the registry cannot answer this filter", { column: 0 });
      if (!res.ok) throw new ApiError(502, "registry", `the registry answered HTTP ${res.status}: ${body.message ?? ""}`.trim());
      return body.nodes ?? [];
    })();
    nodes.catch(() => this.cache.delete(filterText));
    this.cache.set(filterText, { at: now, nodes });
    return nodes;
  }

  async node(identity: string): Promise<ExplorerNode | undefined> {
    const res = await this.get(`/nodes/${encodeURIComponent(identity)}`);
    if (res.status === 404) return undefined;
    if (!res.ok) throw new ApiError(502, "registry", `the registry answered HTTP ${res.status}`);
    return (await res.json()) as ExplorerNode;
  }

  /** Whether /healthz answers, and why not. */
  async probe(): Promise<{ ok: boolean; error?: string }> {
    try {
      const res = await fetch(new URL("/healthz", this.url), { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS), headers: this.token ? { authorization: `Bearer ${this.token}` } : {} });
      if (!res.ok) return { ok: false, error: `the registry at ${this.url} answered HTTP ${res.status} on /healthz` };
      return { ok: true };
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause?.code;
      return { ok: false, error: `the registry at ${this.url} is unreachable (${cause ?? (e as Error).message}); start it with \`muster registry serve\` (http: in its config), or set registry.url` };
    }
  }
}
