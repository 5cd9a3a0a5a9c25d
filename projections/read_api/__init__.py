"""The read API and the public results site: ``caucus serve results``.

Why here: a news desk, a CDN or a browser should read one number over HTTP, not run a Kafka consumer.
Everything served is built by the code that answers ``caucus tally``, ``trail``, ``audit`` and
``diff`` (``projections.queries``, ``projections.tally_documents``, ``projections.trail``,
``projections.audit``), so the site, the API and the command line cannot disagree.

* ``reader.py``: answers with their validators (ETag), cached by what they depend on;
* ``api.py``: the JSON routes (FastAPI; OpenAPI at ``/docs``), conditional GET and Cache-Control;
* ``stream.py``: the results feed as Server-Sent Events, resumable with ``Last-Event-ID``;
* ``site.py`` and ``pages.py``: the HTML pages, with ``static/`` (a small script and a style sheet);
* ``cli.py``: the ``caucus serve results`` command.
"""
