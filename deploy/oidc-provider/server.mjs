// A real OpenID Connect provider for Medbay's OIDC log-in: panva's certified
// oidc-provider with a small people file, for the tests and for trying the log-in
// by hand (deploy/oidc-provider/run). Never a production identity provider: the
// people and their passwords are in a JSON file and the keys live in memory.
//
//   node server.mjs --port 9000 --people people.json \
//        --client medbay --secret medbay-secret --redirect http://127.0.0.1:8000/oidc/callback/
//
// The people file is read again at every log-in and every claims request, so a
// test changes someone's groups between two log-ins by rewriting it. The log-in
// form has a Cancel button that answers the portal with access_denied, as a person
// who declines would. Prints "OIDC-READY <issuer>" once it listens.

import { generateKeyPairSync, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { parseArgs } from "node:util";

import Provider from "oidc-provider";

const { values: opts } = parseArgs({
  options: {
    port: { type: "string", default: "9000" },
    host: { type: "string", default: "127.0.0.1" },
    issuer: { type: "string" },
    people: { type: "string", default: new URL("people.json", import.meta.url).pathname },
    client: { type: "string", default: "medbay" },
    secret: { type: "string", default: "medbay-test-secret" },
    redirect: {
      type: "string",
      multiple: true,
      default: ["http://127.0.0.1:8000/oidc/callback/", "http://localhost:8000/oidc/callback/"],
    },
  },
});
const issuer = opts.issuer || `http://localhost:${opts.port}`;

function people() {
  return JSON.parse(readFileSync(opts.people, "utf8"));
}

function findPerson(username) {
  const wanted = String(username || "").trim().toLowerCase();
  return Object.entries(people()).find(([name]) => name.toLowerCase() === wanted);
}

const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: "jwk" }), use: "sig", alg: "RS256", kid: "k1" };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: opts.client,
      client_secret: opts.secret,
      redirect_uris: opts.redirect,
      response_types: ["code"],
      grant_types: ["authorization_code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["name", "given_name", "family_name", "preferred_username"],
    groups: ["groups"],
    posix: ["posix_username"],
  },
  features: { devInteractions: { enabled: false } },
  pkce: { required: () => true },
  async findAccount(ctx, sub) {
    const found = findPerson(sub);
    if (!found) return undefined;
    return {
      accountId: found[0],
      // Read again here, so a group taken away before this log-in is gone from it.
      async claims() {
        const person = findPerson(sub)?.[1] ?? {};
        return {
          sub: found[0],
          preferred_username: found[0],
          email: person.email,
          email_verified: true,
          name: person.name,
          given_name: person.given_name,
          family_name: person.family_name,
          groups: person.groups ?? [],
          posix_username: person.posix_username ?? found[0],
        };
      },
    };
  },
  async renderError(ctx, out) {
    ctx.type = "html";
    ctx.body = page("Sign-in error", `<h1>Sign-in error</h1><p>${escape(out.error)}: ${escape(out.error_description)}</p>`);
  },
});

function escape(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>${escape(title)}</title></head><body>${body}</body></html>`;
}

function loginForm(uid, client, error = "") {
  return page(
    "Sign in - Medbay test identity provider",
    `<h1>Medbay test identity provider</h1>
<p>Sign in to continue to ${escape(client)}.</p>
${error ? `<p role="alert">${escape(error)}</p>` : ""}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>Username <input name="username" autocomplete="username" autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit" name="action" value="login">Sign in</button>
<button type="submit" name="action" value="cancel">Cancel</button>
</form>`,
  );
}

async function readForm(req) {
  let body = "";
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

async function consent(req, res, details) {
  // Medbay is the site's own application: grant what it asked for without a second page.
  const { prompt, params, session, grantId } = details;
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(" "));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  const saved = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId: saved } }, { mergeWithLastSubmission: true });
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const client = details.params.client_id;
  if (req.method === "GET") {
    if (details.prompt.name === "consent") return consent(req, res, details);
    res.setHeader("Content-Type", "text/html; charset=utf-8");
    return res.end(loginForm(details.uid, client));
  }
  const form = await readForm(req);
  if (form.get("action") === "cancel") {
    const result = { error: "access_denied", error_description: "The person declined to sign in." };
    return provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
  }
  const found = findPerson(form.get("username"));
  if (!found || found[1].password !== form.get("password") || found[1].disabled) {
    res.statusCode = 200; // the form again, as identity providers answer a wrong password
    res.setHeader("Content-Type", "text/html; charset=utf-8");
    return res.end(loginForm(details.uid, client, "Invalid username or password."));
  }
  const result = { login: { accountId: found[0] } };
  return provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
}

const handler = provider.callback();
const server = createServer((req, res) => {
  if (req.url.startsWith("/interaction/")) {
    interaction(req, res).catch((error) => {
      res.statusCode = 400;
      res.setHeader("Content-Type", "text/html; charset=utf-8");
      res.end(page("Sign-in error", `<h1>Sign-in error</h1><p>${escape(error.message)}</p>`));
    });
  } else {
    handler(req, res);
  }
});
server.listen(Number(opts.port), opts.host, () => {
  console.log(`OIDC-READY ${issuer}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
