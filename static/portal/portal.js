// A failed htmx request (403, 404, 500, network) would otherwise change nothing on screen:
// say so in the flash area, with the server's own sentence where it sent one.
document.addEventListener("htmx:responseError", function (event) {
  var xhr = event.detail.xhr;
  var text = "The request failed (" + xhr.status + ").";
  var doc = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
  var reason = doc.querySelector(".form-errors, main p");
  if (reason && reason.textContent.trim()) {
    text = reason.textContent.trim();
  }
  showFlash(text);
});
document.addEventListener("htmx:sendError", function () {
  showFlash("The portal could not be reached. Check your connection and try again.");
});
function showFlash(text) {
  var box = document.getElementById("messages");
  if (!box) return;
  var div = document.createElement("div");
  div.className = "flash flash-error";
  div.setAttribute("role", "alert");
  div.textContent = text;
  box.replaceChildren(div);
}

// The Content-Security-Policy allows no inline script or event handler, so the little
// behaviour the templates need is declared with data attributes and wired here.
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
document.addEventListener("change", function (event) {
  if (event.target.matches("[data-autosubmit]")) {
    event.target.form.submit();
  }
  // A header checkbox that ticks (or clears) every enabled checkbox of its name in its form.
  var name = event.target.getAttribute("data-select-all");
  if (name && event.target.form) {
    event.target.form.querySelectorAll('input[type="checkbox"][name="' + name + '"]').forEach(
      function (box) {
        if (!box.disabled) box.checked = event.target.checked;
      }
    );
  }
});
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    navigator.clipboard.writeText(source.textContent).then(function () {
      button.textContent = "Copied";
    });
  }
  var back = event.target.closest("[data-history-back]");
  if (back && window.history.length > 1) {
    event.preventDefault();
    window.history.back();
  }
});

// A poll (hx-trigger="every ...") is not the person doing something: say so, so that an open
// tab does not keep the session from timing out (portal.middleware.SessionIdleTimeoutMiddleware).
document.addEventListener("htmx:configRequest", function (event) {
  var trigger = event.detail.elt.getAttribute("hx-trigger") || "";
  if (/^\s*every\s/.test(trigger)) {
    event.detail.headers["X-Portal-Background"] = "poll";
  }
});

// Charts arrive as JSON in data attributes (fleet/charts.py): plot them on load and in every
// fragment htmx swaps in, since an inline script in a fragment would be refused by the policy.
htmx.onLoad(function (root) {
  if (!window.Plotly) return;
  var charts = Array.from(root.querySelectorAll("[data-plotly-figure]"));
  if (root.matches && root.matches("[data-plotly-figure]")) charts.push(root);
  charts.forEach(function (chart) {
    var figure = JSON.parse(chart.getAttribute("data-plotly-figure"));
    var config = JSON.parse(chart.getAttribute("data-plotly-config") || "{}");
    window.Plotly.newPlot(chart, figure.data, figure.layout, config);
  });
});

// Progressive disclosure (catalog.forms.GpuShareForm): a select marked data-disclose shows the
// fields whose data-show-for lists the chosen option's data-kind and hides the others, and
// offers only the options tagged with the chosen pool (data-pool). Without this script every
// field shows, and the server ignores those of another kind.
function disclose(select) {
  var chosen = select.selectedOptions[0];
  var kind = chosen ? chosen.getAttribute("data-kind") : "";
  var pool = chosen ? chosen.value : "";
  select.form.querySelectorAll("[data-show-for]").forEach(function (input) {
    var field = input.closest(".field") || input;
    field.hidden = input.getAttribute("data-show-for").split(" ").indexOf(kind) < 0;
  });
  select.form.querySelectorAll("option[data-pool]").forEach(function (option) {
    option.hidden = option.getAttribute("data-pool") !== pool;
    if (option.parentElement.tagName === "OPTGROUP") option.parentElement.hidden = option.hidden;
    // A slice size of another pool would be sent although no longer shown.
    if (option.hidden && option.selected) option.parentElement.closest("select").value = "";
  });
}
// Capturing, so the fields are right before htmx posts the form for the live preview.
document.addEventListener(
  "change",
  function (event) {
    if (event.target.matches("select[data-disclose]")) disclose(event.target);
  },
  true
);
htmx.onLoad(function (root) {
  root.querySelectorAll("select[data-disclose]").forEach(disclose);
});

// Live regions (data-live, portal/live.py): an "unchanged" 204 still moves the "Updated" stamp
// on (its X-Live-Checked header); a poll that fails marks the region stale until one answers.
document.addEventListener("htmx:afterRequest", function (event) {
  var region = event.detail.elt;
  if (!region.hasAttribute || !region.hasAttribute("data-live")) return;
  region.classList.toggle("live-stale", !event.detail.successful);
  var checked = event.detail.xhr && event.detail.xhr.getResponseHeader("X-Live-Checked");
  var time = region.querySelector("[data-live-checked]");
  if (checked && time) time.textContent = checked;
});
document.addEventListener("htmx:sendError", function (event) {
  var region = event.detail.elt;
  if (region.hasAttribute && region.hasAttribute("data-live")) region.classList.add("live-stale");
});

// The nav's <details> menus: one open at a time; a click elsewhere or Escape closes them.
document.addEventListener("click", function (event) {
  var inside = event.target.closest("details.navgroup");
  document.querySelectorAll("details.navgroup[open]").forEach(function (group) {
    if (group !== inside) group.removeAttribute("open");
  });
});
document.addEventListener("keydown", function (event) {
  if (event.key !== "Escape") return;
  document.querySelectorAll("details.navgroup[open]").forEach(function (group) {
    var focused = group.contains(document.activeElement);
    group.removeAttribute("open");
    if (focused) group.querySelector("summary").focus();
  });
});

// Tabs that do not fit scroll sideways: mark which edges hide more tabs (the CSS fades them),
// and bring the active tab into view.
function markTabsOverflow(tabs) {
  var hidden = tabs.scrollWidth - tabs.clientWidth;
  tabs.classList.toggle("tabs-more-start", tabs.scrollLeft > 1);
  tabs.classList.toggle("tabs-more-end", hidden - tabs.scrollLeft > 1);
}
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".tabs").forEach(function (tabs) {
    var active = tabs.querySelector(".active");
    if (active && tabs.scrollWidth > tabs.clientWidth) {
      tabs.scrollLeft = active.offsetLeft - tabs.offsetLeft - tabs.clientWidth / 2;
    }
    markTabsOverflow(tabs);
    tabs.addEventListener("scroll", function () {
      markTabsOverflow(tabs);
    });
  });
});
window.addEventListener("resize", function () {
  document.querySelectorAll(".tabs").forEach(markTabsOverflow);
});
