"""`preflab report`: one self-contained HTML page of what the store knows.

It sits above every library layer (it reads db, labelling and training; none of
them imports it):

- `build`: `build_report(session)` gathers the data by section, `write_report`
  builds and renders it (what the command and the retrain job call);
- `data`, `agreement`, `judges`, `leaderboard`, `models`, `optimisation`: one section each;
- `charts` (matplotlib → inline SVG), `render` (Jinja2: `page.html.j2`, `page.css`);
- `privacy`: how free text from the store is cut down for the page (excerpts, model
  labels without folders, no email addresses); people appear by pseudonym only;
- `cli`: the click command.
"""
