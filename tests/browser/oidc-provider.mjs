// A real OpenID Connect provider for the sign-in test (collector/tests/it/sign_in.rs):
// oidc-provider (a certified implementation) on 127.0.0.1 with one confidential client,
// gpulens, and test people whose groups the ID token carries. Its development login form
// takes any password; the account is the login typed.
//
//   node oidc-provider.mjs PORT REDIRECT_URI CLIENT_SECRET
//
// Prints "ready ISSUER" once it listens.
import Provider from 'oidc-provider';

const [port, redirectUri, clientSecret] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const people = {
  olga: { name: 'Olga Operator', groups: ['gpu-platform'] },
  victor: { name: 'Victor Viewer', groups: ['gpu-viewers'] },
  maria: { name: 'Maria Scoped', groups: ['team-ml', 'unrelated-group'] },
  eve: { name: 'Eve Nobody', groups: ['marketing'] },
};

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'gpulens',
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  // PKCE with S256 is required of every client.
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email'],
    groups: ['groups'],
  },
  // Put the scopes' claims into the ID token, where gpulens reads them.
  conformIdTokenClaims: false,
  async findAccount(ctx, id) {
    const p = people[id];
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          preferred_username: id,
          name: p ? p.name : id,
          email: `${id}@example.test`,
          groups: p ? p.groups : [],
        };
      },
    };
  },
});
provider.on('server_error', (ctx, err) => console.error('provider error', err));

const server = provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
