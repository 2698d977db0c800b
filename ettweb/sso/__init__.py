"""Single sign-on with OpenID Connect: the identity provider's groups give the role."""
