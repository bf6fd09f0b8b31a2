import type { z } from "zod";
import { puppetDbSettingsProblem } from "../puppetdb/http.js";

/**
 * The `puppetdb:` key of the registry's config (and the console's): where PuppetDB is and the
 * credential to ask it with (docs/puppetdb.md). Built with the caller's zod, like tls.ts.
 */
export const puppetDbConfigSchema = (zod: typeof z) =>
  zod
    .object({
      /** https://puppetdb.example.net:8081; http:// only to a loopback address (PuppetDB's unauthenticated port). */
      url: zod.string().min(1),
      /** PEM files: the CA that signed PuppetDB's certificate; this daemon's certificate and key (one PuppetDB's ssl-ca-cert trusts). */
      ca: zod.string().min(1).optional(),
      cert: zod.string().min(1).optional(),
      key: zod.string().min(1).optional(),
      /** Seconds per request to PuppetDB. */
      timeout: zod.number().positive().max(600).default(30),
    })
    .strict()
    .superRefine((p, ctx) => {
      const problem = puppetDbSettingsProblem(p);
      if (problem) ctx.addIssue({ code: "custom", path: ["url"], message: problem });
    });

export type PuppetDbConfig = z.output<ReturnType<typeof puppetDbConfigSchema>>;

/** http.ts's settings from the config section. */
export function puppetDbSettings(c: PuppetDbConfig): { url: string; ca?: string; cert?: string; key?: string; timeoutMs: number } {
  return { url: c.url, ca: c.ca, cert: c.cert, key: c.key, timeoutMs: c.timeout * 1000 };
}
