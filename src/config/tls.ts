import type { z } from "zod";

/**
 * The `tls:` key of a config file (broker/connect.ts's TlsSettings): ca, and cert/key together.
 * Built with the caller's zod, so the client config builds it only when it reads a file.
 */
export const tlsConfigSchema = (zod: typeof z) =>
  zod
    .object({
      ca: zod.string().min(1).optional(),
      cert: zod.string().min(1).optional(),
      key: zod.string().min(1).optional(),
    })
    .strict()
    .refine((t) => !t.cert === !t.key, { message: "cert and key go together: set both or neither" });
