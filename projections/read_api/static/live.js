// Live results. The results feed (Server-Sent Events) carries every new tally: the numbers of this
// page's main table are written in place at once, then the whole <main> is fetched again and swapped
// in (rows re-ordered, counties, trail, findings). No reload: scroll position and the rest stay.
// A copy reflects every tally that had arrived when it was asked for (the store holds a tally before the
// feed carries it); a tally that arrived while the copy was on its way is written into it again, or
// the copy would show older numbers than the page already did.
// The page names the feed and the position it was built at (data-feed), so nothing published after
// it was built is missed; EventSource resumes from the last event id by itself after a disconnect.
(function () {
  "use strict";
  var feed = document.body.getAttribute("data-feed");
  var status = document.getElementById("live-status");
  if (!feed || !window.EventSource || !window.fetch) {
    if (status) status.textContent = "";
    return;
  }
  var timer = null, busy = false, again = false, seen = {}, newest = {}, arrived = 0;
  function say(text) { if (status) status.textContent = text; }
  function grouped(text) {  // "43209" -> "43,209"; "1234.5678" -> "1,234.5678"
    var parts = String(text).split(".");
    parts[0] = parts[0].replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return parts.join(".");
  }
  function percent(part, whole) {  // two decimals, half up, in integers (as the server rounds)
    if (!whole) return "0.00";
    var h = Math.floor((2 * part * 10000 + whole) / (2 * whole));
    return Math.floor(h / 100) + "." + String(h % 100).padStart(2, "0");
  }
  function setCell(row, index, text) {
    var cell = row.querySelectorAll("td")[index];
    if (!cell) return;
    var value = cell.querySelector(".value") || cell;
    value.textContent = text;
  }
  function apply(t) {
    var table = document.querySelector('table.tally[data-kind="' + t.kind + '"]');
    if (!table || table.getAttribute("data-key") !== t.key) return false;
    var area = t.kind !== "unit";
    var sde = area ? t.sde_display_sum : t.sde_display;
    table.querySelectorAll("tbody tr[data-candidate]").forEach(function (row) {
      var c = row.getAttribute("data-candidate");
      setCell(row, 0, grouped(t.first[c] || 0));
      setCell(row, 1, grouped(t.final[c] || 0));
      setCell(row, 2, grouped(t.cds[c] || 0));
      if (area) setCell(row, 3, grouped(sde[c] || "0.0000"));
      else setCell(row, 4, sde[c] || "0.0000");
    });
    var reporting = document.querySelector('[data-field="reporting"]');
    if (area && reporting) {
      reporting.textContent = grouped(t.units_reporting) + " of " + grouped(t.units_defined) +
        " (" + percent(t.units_reporting, t.units_defined) + " %)";
    }
    return true;
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var asked = arrived;
    fetch(window.location.href, { cache: "no-cache", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("results");
        var current = document.getElementById("results");
        if (fresh && current) {
          current.replaceWith(document.importNode(fresh, true));
          Object.keys(newest).forEach(function (key) {
            if (newest[key].arrived > asked) apply(newest[key].tally);
          });
        }
        say("live · updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("live · update failed, retrying with the next change"); })
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource(feed);
  source.addEventListener("ready", function () { say("live"); });
  source.addEventListener("tally", function (message) {
    var t = JSON.parse(message.data), key = t.kind + ":" + t.key;
    if (key in seen && t.version <= seen[key]) return;  // a copy, or older than what is shown
    seen[key] = t.version;
    arrived += 1;
    if (apply(t)) newest[key] = { tally: t, arrived: arrived };  // only this page's own tables' tallies
    clearTimeout(timer);
    timer = setTimeout(refresh, 50);
  });
  source.onerror = function () { say("reconnecting to live updates…"); };
})();
