// Reply status codes, with MCollective's meanings. The wire carries the number.
export const Status = {
  OK: 0,
  Aborted: 1,
  UnknownAction: 2,
  MissingData: 3,
  InvalidData: 4,
  UnknownError: 5,
} as const;
export type StatusCode = (typeof Status)[keyof typeof Status];

export const statusName: Record<StatusCode, string> = {
  0: "OK",
  1: "Aborted",
  2: "Unknown action",
  3: "Missing data",
  4: "Invalid data",
  5: "Unknown error",
};

export function isStatusCode(n: unknown): n is StatusCode {
  return typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= 5;
}
