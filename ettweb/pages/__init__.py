"""The pieces every page is built from: figures, filter forms, GET-parameter checks, CSV
tables and the template filters. Feature apps (dashboard, components, rollouts, changes,
reports, metrics, sso, the API) build on these and never on each other's pages; import-linter
holds that line (``pyproject.toml``)."""
