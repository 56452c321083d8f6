// The service's canonical JSON, reproduced byte for byte (src/fingerprint.rs;
// the contract is in docs/api.md). The adapter derives keys from this text, so
// two spellings the service treats as one request give one key:
// - object members sorted by key in code-point order (not UTF-16 order),
//   compact separators; members whose value is null or undefined dropped,
//   null inside arrays kept;
// - an integral number of magnitude at most 2^53 printed as an integer
//   (1.0 is 1, -0 is 0); any other number in the shortest form that round-trips,
//   in the service's layout (fixed notation for decimal exponents -5 to 15,
//   else 1.5e+300);
// - strings and keys NFC-normalized, non-ASCII kept, escaped as JSON.stringify does.
// JavaScript numbers cannot hold integers beyond 2^53 exactly: pass a BigInt.

const EXACT_LIMIT = 2 ** 53;
const INT_MIN = -(2n ** 63n);
const INT_MAX = 2n ** 64n - 1n;

/** The canonical JSON text of `value`. */
export function canonical(value) {
  const out = [];
  write(out, value);
  return out.join("");
}

/** Lower-case hex SHA-256 of `text` as UTF-8 (WebCrypto, so it is async). */
export async function sha256Hex(text) {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The fingerprint the service stores for `tool` and `args`. */
export function fingerprint(tool, args) {
  return sha256Hex(canonical({ args, tool }));
}

function write(out, value) {
  if (value === null || value === undefined) {
    out.push("null");
  } else if (typeof value === "boolean") {
    out.push(value ? "true" : "false");
  } else if (typeof value === "number") {
    out.push(number(value));
  } else if (typeof value === "bigint") {
    out.push(value >= INT_MIN && value <= INT_MAX ? value.toString() : number(Number(value)));
  } else if (typeof value === "string") {
    out.push(string(value));
  } else if (Array.isArray(value)) {
    out.push("[");
    value.forEach((item, index) => {
      if (index) out.push(",");
      write(out, item);
    });
    out.push("]");
  } else if (typeof value === "object") {
    if (typeof value.toJSON === "function") return write(out, value.toJSON());
    writeObject(out, value);
  } else {
    throw new TypeError(`not JSON: ${typeof value}`);
  }
}

function writeObject(out, object) {
  const members = Object.entries(object)
    .filter(([, item]) => item !== null && item !== undefined)
    .map(([key, item]) => [key.normalize("NFC"), item, canonical(item)]);
  // Two keys can be equal after NFC; ordering those by value keeps the text
  // the same whatever order they came in (as the service does).
  members.sort((a, b) => compareCodePoints(a[0], b[0]) || compareCodePoints(a[2], b[2]));
  out.push("{");
  members.forEach(([key, , text], index) => {
    if (index) out.push(",");
    out.push(string(key), ":", text);
  });
  out.push("}");
}

/** Order by Unicode code point, as the service (and Python) sort; `<` compares UTF-16 units. */
function compareCodePoints(a, b) {
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(j);
    if (x !== y) return x - y;
    i += x > 0xffff ? 2 : 1;
    j += y > 0xffff ? 2 : 1;
  }
  return a.length - i - (b.length - j);
}

function string(text) {
  return JSON.stringify(text.normalize("NFC"));
}

function number(n) {
  if (!Number.isFinite(n)) throw new RangeError("JSON has no NaN or Infinity");
  if (Number.isInteger(n) && Math.abs(n) <= EXACT_LIMIT) return String(n === 0 ? 0 : n);
  // toExponential() gives the shortest digits that round-trip: "d.ddde±x".
  const [mantissa, exp] = Math.abs(n).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const scientific = Number(exp);
  const sign = n < 0 ? "-" : "";
  if (scientific >= -5 && scientific <= 15) return sign + fixed(digits, scientific);
  const lead = digits.length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
  return `${sign}${lead}e${scientific >= 0 ? "+" : "-"}${Math.abs(scientific)}`;
}

/** `digits` (shortest, no trailing zeros) times 10^scientific, in fixed notation. */
function fixed(digits, scientific) {
  if (digits.length - 1 <= scientific) {
    return digits + "0".repeat(scientific + 1 - digits.length) + ".0";
  }
  if (scientific >= 0) return `${digits.slice(0, scientific + 1)}.${digits.slice(scientific + 1)}`;
  return "0." + "0".repeat(-scientific - 1) + digits;
}
