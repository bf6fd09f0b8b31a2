// Types of model.js (plain JS served to the browser as is), for test/web/model.test.ts.
export interface TimelineEntry { stage: string; start: string; end?: string }
export const STATUS_ORDER: Record<string, number>;
export function boardOrder(a: { status: string; identity: string; gone?: unknown }, b: { status: string; identity: string; gone?: unknown }): number;
export function matchesFind(node: { identity: string; status: string; stage?: string | null; master?: string | null }, find: string): boolean;
export function statusCounts(nodes: { status: string }[]): Record<"failed" | "in_progress" | "pending" | "done", number>;
export function timelineSegments(timeline: TimelineEntry[], now: number, scaleMs?: number): { stage: string; ms: number; fraction: number; running: boolean }[];
export function timelineTotal(timeline: TimelineEntry[], now: number): number;
export function timelineScale(nodes: { timeline: TimelineEntry[] }[], now: number): number;
export function timelineText(timeline: TimelineEntry[], now: number): string;
export interface StageStat { stage: string; samples: number; p95_ms: number | null }
export interface BoardNodeLike { identity: string; status: string; stage?: string | null; master?: string | null; started?: string | null; finished?: string | null; updated?: string | null; rounds?: number; elapsed_s?: number | null; tries?: number; gone?: { since: string; reason: string } | null; waiting?: { since: string; reason: string; master: string | null } | null; timeline?: TimelineEntry[]; last_error?: string | null }
export const BOARD_SORTS: string[];
export function sortBoard<N extends BoardNodeLike>(nodes: N[], sort?: string, dir?: string, now?: number): N[];
export const STUCK_MIN_SAMPLES: number;
export const STUCK_MIN_MS: number;
export function stuckInfo(node: BoardNodeLike, stages: StageStat[], now: number): { stage: string; since: number; for_ms: number; usual_ms: number } | null;
export function formatRelative(ms: number | null | undefined, now: number): string;
export function formatEta(seconds: number | null | undefined): string;
export function toCsv(rows: Record<string, unknown>[], columns: string[]): string;
export function boardExportRows(nodes: BoardNodeLike[], stages: StageStat[], now: number): Record<string, unknown>[];
export const BOARD_EXPORT_COLUMNS: string[];
export function routeHash(view: string, arg?: string, params?: Record<string, unknown>): string;
export function formatDuration(seconds: number | null | undefined): string;
export function elapsedSeconds(node: { status: string; started?: string | null; elapsed_s?: number | null }, now: number): number | null | undefined;
export function caretLine(source: string, column: number): string;
export function parseColumns(text: string | null | undefined): string[];
export function countBars<V>(counts: { value: V; count: number }[]): { value: V; count: number; fraction: number }[];
export function visibleRange(scrollTop: number, viewportHeight: number, rowHeight: number, total: number, overscan?: number): { first: number; last: number };
export function cellText(v: unknown): string;
export function parseRoute(hash: string): { view: string; arg: string | undefined; params: Record<string, string> };
export interface PuppetRunView {
  status: "failed" | "changed" | "unchanged";
  label: string;
  at: number | null;
  duration_s: number | null;
  environment: string | null;
  config_version: string | null;
  puppet_version: string | null;
  counts: { name: string; value: number }[];
  failed_resources: { resource: string; messages: string[] }[];
  changed_resources: { resource: string; messages: string[] }[];
  left_out: number;
  errors: string[];
  message: string | null;
  enabled: boolean | null;
  disable_message: string | null;
  applying: boolean;
}
export function puppetRunView(summary: Record<string, unknown> | null, status: Record<string, unknown> | null, report?: Record<string, unknown> | null): PuppetRunView | null;
export function localTime(ms: number): string;
export interface HealthKind { kind: string; label: string; one: string }
export const HEALTH_KINDS: HealthKind[];
export interface HealthNodeLike { identity: string; problems?: { kind: string; why: string; since?: string }[] }
export function healthGroups(nodes: HealthNodeLike[]): (HealthKind & { nodes: { identity: string; why: string; since: string | null }[] })[];
export function titleWithProblems(title: string, unhealthy: number): string;
export const SERVICE_ROLES: { role: string; label: string }[];
export interface ServiceLike { name: string; role: string; observer?: string | null; last_seen?: string | null; checks?: { name: string; status: string; why: string }[]; problems?: { kind: string; why: string }[] }
export function siteRows(services: ServiceLike[] | null | undefined): { name: string; role: string; roleLabel: string; state: string; why: string; observer: string | null; checks: { name: string; status: string; why: string }[]; lastSeen: string | null }[];
export function freshSeconds(view: { fresh_as_of?: string | null } | null | undefined, time: string | null | undefined, now: number): number | null;
export function newProblems(before: HealthNodeLike[] | null | undefined, after: HealthNodeLike[] | null | undefined): { identity: string; kind: string; why: string }[];
export function flattenFacts(obj: Record<string, unknown> | null | undefined, prefix?: string, out?: Record<string, unknown>): Record<string, unknown>;
export function factGroups(facts: Record<string, unknown> | null | undefined, find?: string): { name: string; entries: [string, unknown][] }[];
export function explorerExport(rows: { identity: string; columns?: Record<string, unknown> }[], columns: string[]): { rows: Record<string, unknown>[]; columns: string[] };
export interface RoundEventLike { at: string; round: number; event: string; stage?: string; detail?: string; by?: string }
export function provisioningLine(p: { status: string; stage?: string | null; master?: string | null; started?: string | null; elapsed_s?: number | null; rounds?: number; tries?: number }, now: number): string;
export function roundRows(history: RoundEventLike[] | null | undefined): { at: string; round: number; event: string; what: string; stage: string; detail: string }[];
export function chartTicks(buckets: { start: number | string }[]): { i: number; start: number | string; anchor: "start" | "middle" | "end" }[];
export function unreachableSet(healthNodes: { identity: string; reachable?: boolean; problems?: { kind: string }[] }[] | null | undefined): Set<string>;
export function boardStatus(node: { identity: string; status: string }, unreachable: Set<string> | null | undefined): { status: string; unreachable: boolean; label: string };
export function osText(os: unknown): string;
export function factCellText(column: string, v: unknown): string;
export function knownRunView(run: { status?: string | null; time?: number | string; last_run?: string | null; resources?: { total: number; changed: number; failed: number } | null; duration_s?: number | null; config_version?: string | null } | null | undefined): (PuppetRunView & { known_only: true }) | null;
export interface AlertEventLike { type: string; time: number; by: string; identity?: string; kind?: string; told?: string[]; notifier?: string; held?: string; error?: string; of?: string; until?: number; note?: string }
export function alertEventRow(e: AlertEventLike): { what: string; about: string; detail: string; ok: boolean };
export function deliveryText(d: { ok: boolean; at: string; notifier: string | null; told: string[]; error: string | null; failing_since: string | null } | null | undefined, now?: number): string;
