// A real OpenID Connect provider (npm oidc-provider v9) for the portal's SSO end-to-end tests.
//
// It plays the part of Keycloak: one confidential client (the portal's), the authorization code
// flow with PKCE required, and a "groups" claim carrying group paths such as
// /tenants/alpha/admin. With --public-client-id it also has the public client kubectl signs in
// with (kubelogin: a native app, no secret, redirected to http://localhost:8000). With
// --tls-cert and --tls-key it serves HTTPS, as an issuer Kubernetes API servers trust must.
//
// Usage: node server.mjs [--port N] --redirect-uri URI --accounts FILE [--client-id ID]
//                        [--client-secret SECRET] [--public-client-id ID]
//                        [--tls-cert FILE --tls-key FILE]
// Every option may also come from the environment: OIDC_TEST_PORT, OIDC_TEST_REDIRECT_URI,
// OIDC_TEST_ACCOUNTS, OIDC_TEST_CLIENT_ID, OIDC_TEST_CLIENT_SECRET,
// OIDC_TEST_PUBLIC_CLIENT_ID, OIDC_TEST_TLS_CERT, OIDC_TEST_TLS_KEY. Port 0 (the default) lets
// the kernel pick a free port, so parallel test runs cannot race for one.
//
// FILE is JSON: {"<account id>": {"email": ..., "groups": [...], ...}, ...}. The account id is
// the subject (sub). The file is read again on every account lookup, so a test changes a user's
// groups between two sign-ins by rewriting it, as an admin would in the identity provider.
//
// Prints "READY <issuer>" on stdout once it accepts connections.

import * as crypto from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as https from 'node:https';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.OIDC_TEST_PORT ?? '0' },
    'redirect-uri': { type: 'string', default: process.env.OIDC_TEST_REDIRECT_URI },
    accounts: { type: 'string', default: process.env.OIDC_TEST_ACCOUNTS },
    'client-id': { type: 'string', default: process.env.OIDC_TEST_CLIENT_ID ?? 'portal' },
    'client-secret': {
      type: 'string',
      default: process.env.OIDC_TEST_CLIENT_SECRET ?? 'portal-test-secret',
    },
    'public-client-id': { type: 'string', default: process.env.OIDC_TEST_PUBLIC_CLIENT_ID ?? '' },
    'tls-cert': { type: 'string', default: process.env.OIDC_TEST_TLS_CERT ?? '' },
    'tls-key': { type: 'string', default: process.env.OIDC_TEST_TLS_KEY ?? '' },
  },
});

// kubelogin's default redirect (it listens on localhost:8000, or 18000 when that is taken).
const KUBELOGIN_REDIRECT_URIS = ['http://localhost:8000', 'http://localhost:18000'];

for (const required of ['redirect-uri', 'accounts']) {
  if (!args[required]) {
    console.error(`missing --${required}`);
    process.exit(2);
  }
}

async function loadAccounts() {
  return JSON.parse(await readFile(args.accounts, 'utf8'));
}

function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!doctype html><html><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>`
    + `</head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`;
}

function loginForm(uid, error = '') {
  // Password-less on purpose: the tests are about what the portal does with the tokens, and
  // an unknown account id is still refused below.
  const notice = error ? `<p class="error">${escapeHtml(error)}</p>` : '';
  return page('Sign in to the test IdP', `${notice}
<form method="post" action="/interaction/${escapeHtml(uid)}">
  <input type="hidden" name="prompt" value="login">
  <label>Account <input type="text" name="login" required autofocus></label>
  <button type="submit">Sign in</button>
</form>`);
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function send(res, status, html) {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
  });
  res.end(html);
}

// Listen first so the issuer can name the port the kernel chose. The tests learn the port from
// READY, printed once the provider exists; anything earlier is a stray and gets a 503.
let provider;
let providerCallback;
const tls = args['tls-cert'] && args['tls-key'];
const handler = (req, res) => {
  if (!provider) return send(res, 503, page('Starting', ''));
  const match = /^\/interaction\/([^/?]+)$/.exec(new URL(req.url, 'http://x').pathname);
  const handle = match ? interaction(req, res) : providerCallback(req, res);
  Promise.resolve(handle).catch((err) => {
    console.error('request failed:', err);
    if (!res.headersSent) send(res, 500, page('Error', escapeHtml(err.message)));
  });
};
const server = tls
  ? https.createServer(
    { cert: readFileSync(args['tls-cert']), key: readFileSync(args['tls-key']) },
    handler,
  )
  : http.createServer(handler);

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { uid, prompt, params, session } = details;

  if (prompt.name === 'login') {
    if (req.method !== 'POST') return send(res, 200, loginForm(uid));
    const form = await readForm(req);
    const accountId = form.get('login') ?? '';
    if (!Object.hasOwn(await loadAccounts(), accountId)) {
      return send(res, 401, loginForm(uid, `No account ${accountId}`));
    }
    return provider.interactionFinished(req, res, { login: { accountId } }, {
      mergeWithLastSubmission: false,
    });
  }

  if (prompt.name === 'consent') {
    // Like a Keycloak client with "Consent required" off: grant what the client asked for.
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const { missingOIDCScope, missingOIDCClaims } = prompt.details;
    if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
    if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
    const grantId = await grant.save();
    return provider.interactionFinished(req, res, { consent: { grantId } }, {
      mergeWithLastSubmission: true,
    });
  }

  return send(res, 501, page('Not implemented', escapeHtml(prompt.name)));
}

server.listen(Number(args.port), '127.0.0.1', () => {
  const issuer = `${tls ? 'https' : 'http'}://127.0.0.1:${server.address().port}`;
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const clients = [
    {
      client_id: args['client-id'],
      client_secret: args['client-secret'],
      redirect_uris: [args['redirect-uri']],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      // allauth picks client_secret_post when discovery lists it (it does, by default); the
      // token endpoint then refuses any other method, so a change in allauth shows up here.
      token_endpoint_auth_method: 'client_secret_post',
    },
  ];
  if (args['public-client-id']) {
    // Like the Keycloak client the operator guide describes for kubectl: public (no secret),
    // PKCE, loopback redirects only.
    clients.push({
      client_id: args['public-client-id'],
      application_type: 'native',
      redirect_uris: KUBELOGIN_REDIRECT_URIS,
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'none',
    });
  }

  provider = new Provider(issuer, {
    clients,
    // A PKCE-less authorization request is refused (invalid_request), so a sign-in that works
    // proves the portal sent code_challenge and the matching code_verifier.
    pkce: { required: () => true },
    responseTypes: ['code'],
    claims: {
      // groups rides on "openid" like a Keycloak group mapper on a default client scope: it is
      // released whatever scopes the portal asks for, so the portal's default OIDC_SCOPES work.
      openid: ['sub', 'groups'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username', 'given_name', 'family_name'],
    },
    // Keycloak puts mapped claims in the ID token too, not only in userinfo.
    conformIdTokenClaims: false,
    async findAccount(ctx, sub) {
      const record = (await loadAccounts())[sub];
      if (!record) return undefined;
      return {
        accountId: sub,
        async claims() {
          // Re-read so a rewritten file takes effect at the very next token or userinfo call.
          const fresh = (await loadAccounts())[sub] ?? record;
          return { ...fresh, sub };
        },
      };
    },
    features: { devInteractions: { enabled: false } },
    cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
    jwks: {
      keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'test', use: 'sig', alg: 'RS256' }],
    },
  });

  providerCallback = provider.callback();

  for (const event of ['server_error', 'authorization.error', 'grant.error', 'userinfo.error']) {
    // Printed so a failing test can show why the provider said no.
    provider.on(event, (ctx, err) => {
      console.error(`${event}: ${err.message} ${err.error_description ?? ''}`);
    });
  }
  console.log(`READY ${issuer}`);
});
