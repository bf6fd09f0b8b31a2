import { z } from "zod";
import { puppetDbConfigSchema } from "../config/puppetdb.js";
import { tlsConfigSchema } from "../config/tls.js";
import { loadConfigFile, validateConfig } from "../config/load.js";
import { isValidCollective } from "../protocol/subjects.js";
import { isLoopback } from "../security/loopback.js";
import { DEFAULT_BUCKET, isValidBucketName } from "./bucket.js";

// `muster registry serve --config FILE` (YAML or JSON). Every key has a default, so the daemon
// also runs without a file. docs/registry.md describes each key.

export const RegistryConfigSchema = z
  .object({
    /** Broker URL(s): a string (comma-separated) or a list. --broker and MUSTER_BROKER win. */
    broker: z.union([z.string(), z.array(z.string())]).optional(),
    brokers: z.array(z.string()).optional(),
    /** TLS to the broker (docs/security.md#tls); MUSTER_TLS_* when absent. */
    tls: tlsConfigSchema(z).optional(),
    collectives: z.array(z.string().refine(isValidCollective, "a collective name: letters, digits, - and _")).min(1).default(["muster"]),
    bucket: z.string().refine(isValidBucketName, "a bucket name: letters, digits, - and _").default(DEFAULT_BUCKET),
    /** Copies of the bucket in a JetStream cluster (3 on a 3-member cluster: it survives losing a broker); applies when the bucket is made. */
    replicas: z.number().int().min(1).max(5).default(1),
    /** Seconds: a node not heard for this long is expired. */
    max_age: z.number().positive().default(900),
    /** Seconds: an unchanged registration rewrites the stored record only once it is this old (default max_age/10). */
    refresh: z.number().positive().optional(),
    /** Seconds accepted registrations wait to be written together. */
    flush_interval: z.number().positive().max(60).default(0.25),
    /** Largest registration message accepted, bytes. */
    max_payload: z.number().int().positive().default(1024 * 1024),
    /** Distinct nodes waiting to be written before further registrations are dropped. */
    max_pending: z.number().int().positive().default(200_000),
    /** Ask the collectives' nodes to register at once when the daemon starts, instead of waiting out their interval. */
    fill_on_start: z.boolean().default(true),
    http: z
      .object({
        host: z.string().default("127.0.0.1"),
        port: z.number().int().min(0).max(65535).default(8089),
        /** File holding the bearer token HTTP clients must send (Authorization: Bearer ...). */
        token_file: z.string().min(1).optional(),
      })
      .strict()
      .refine((h) => h.token_file !== undefined || isLoopback(h.host), {
        message: "node metadata must not be served off loopback without authentication: set http.token_file, or bind http.host to 127.0.0.1",
        path: ["token_file"],
      })
      .optional(),
    /** PuppetDB: with it the registry answers --dm puppetdb and source=puppetdb over HTTP (docs/puppetdb.md). */
    puppetdb: puppetDbConfigSchema(z).optional(),
    log: z
      .object({
        level: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
        file: z.string().optional(),
      })
      .strict()
      .default({ level: "info" }),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.refresh !== undefined && c.refresh > c.max_age) ctx.addIssue({ code: "custom", path: ["refresh"], message: "must not exceed max_age" });
  });

export type RegistryConfig = z.output<typeof RegistryConfigSchema>;

export function loadRegistryConfig(path: string | undefined): RegistryConfig {
  return path ? loadConfigFile(path, RegistryConfigSchema, "registry config") : validateConfig({}, RegistryConfigSchema, "registry config");
}

export function configuredBrokers(c: RegistryConfig): string[] {
  const one = typeof c.broker === "string" ? c.broker.split(",").map((s) => s.trim()).filter(Boolean) : (c.broker ?? []);
  return [...one, ...(c.brokers ?? [])];
}

/** Milliseconds the daemon works with: refresh, and the bucket's expiry max_age + refresh. */
export function timings(c: RegistryConfig): { maxAgeMs: number; refreshMs: number; expireAfterMs: number; flushMs: number } {
  const maxAgeMs = Math.round(c.max_age * 1000);
  const refreshMs = Math.round((c.refresh ?? c.max_age / 10) * 1000);
  return { maxAgeMs, refreshMs, expireAfterMs: maxAgeMs + refreshMs, flushMs: Math.round(c.flush_interval * 1000) };
}
