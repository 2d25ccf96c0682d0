// gpumeter's console script: the pages are drawn by the agent, and this
// adds only what a server cannot do. It tells the agent the browser's
// time zone, signs in once (from the form or from #token=… in the
// address, which it then forgets), signs out, and sends the pages'
// buttons to the API with the session's CSRF token after a confirmation.
"use strict";
(() => {
  const zoneCookie = "gpumeter_tz";
  const cookie = name => {
    for (const part of document.cookie.split("; ")) {
      const i = part.indexOf("=");
      if (part.slice(0, i) === name) return decodeURIComponent(part.slice(i + 1));
    }
    return null;
  };
  // The agent draws times in the zone the browser is in; the first page
  // it draws before it knows is drawn again once.
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  if (cookie(zoneCookie) !== zone) {
    document.cookie = zoneCookie + "=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; SameSite=Strict";
    if (document.body.dataset.zone !== zone && cookie(zoneCookie) === zone) {
      location.reload();
      return;
    }
  }

  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : null;
  async function call(method, path, body) {
    const headers = {};
    if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store", credentials: "same-origin" });
    let data = null;
    try { data = await r.json(); } catch (_) { /* not JSON */ }
    return { status: r.status, ok: r.ok, data, message: (data && data.message) || "HTTP " + r.status };
  }
  const status = (el, text, failed) => {
    el.textContent = text;
    el.classList.toggle("err", !!failed);
  };

  // Sign-in.
  const login = document.getElementById("login");
  if (login) {
    const st = document.getElementById("status");
    const next = () => {
      const n = login.dataset.next;
      return n && /^\/(?![\/\\])/.test(n) ? n : "/";
    };
    const signIn = async token => {
      status(st, "signing in…", false);
      let res;
      try {
        res = await call("POST", "/api/v1/session", { token });
      } catch (e) {
        status(st, "cannot sign in: " + e.message, true);
        return;
      }
      if (res.status === 401) { status(st, "bad token: " + res.message, true); return; }
      if (!res.ok) { status(st, "cannot sign in: " + res.message, true); return; }
      location.replace(next());
    };
    login.addEventListener("submit", ev => {
      ev.preventDefault();
      const field = document.getElementById("token");
      const token = field.value.trim();
      field.value = "";
      signIn(token);
    });
    const m = location.hash.match(/^#token=([A-Za-z0-9_-]+)$/);
    if (m) {
      history.replaceState(null, "", location.pathname + location.search);
      signIn(m[1]);
    } else if (location.hash.startsWith("#token=")) {
      history.replaceState(null, "", location.pathname + location.search);
      status(st, "bad token: the address holds no token of the form gpm_…", true);
    } else {
      document.getElementById("token").focus();
    }
  } else if (location.hash.startsWith("#token=")) {
    // Already signed in: the token is not needed, and must not stay.
    history.replaceState(null, "", location.pathname + location.search);
  }

  // Sign-out.
  const signout = document.getElementById("signout");
  if (signout) {
    signout.addEventListener("click", async () => {
      const res = await call("DELETE", "/api/v1/session").catch(e => ({ ok: false, status: 0, message: e.message }));
      if (res.ok || res.status === 401) {
        // The agent's answer left a cookie that makes the sign-in page
        // say "signed out", once.
        location.replace("/signin?next=" + encodeURIComponent(location.pathname + location.search));
        return;
      }
      const st = document.getElementById("action-status");
      st.hidden = false;
      status(st, "cannot sign out: " + res.message, true);
    });
  }

  // Buttons that change something: <button data-method data-path
  // data-confirm [data-body]>. The dialog asks first; the answer is
  // shown, and the page drawn again.
  const dialog = document.getElementById("confirm");
  const actionStatus = document.getElementById("action-status");
  let pending = null;
  document.addEventListener("click", ev => {
    const b = ev.target.closest("button[data-path]");
    if (!b) return;
    ev.preventDefault();
    pending = b;
    document.getElementById("confirm-text").textContent = b.dataset.confirm || "Are you sure?";
    dialog.showModal();
  });
  if (dialog) {
    dialog.addEventListener("close", async () => {
      const b = pending;
      pending = null;
      if (!b || dialog.returnValue !== "ok") return;
      b.disabled = true;
      actionStatus.hidden = false;
      status(actionStatus, (b.dataset.doing || "working") + "…", false);
      const body = b.dataset.body ? JSON.parse(b.dataset.body) : {};
      const res = await call(b.dataset.method || "POST", b.dataset.path, body).catch(e => ({ ok: false, status: 0, message: e.message }));
      if (res.status === 401) { location.reload(); return; }
      if (!res.ok) {
        b.disabled = false;
        status(actionStatus, "refused: " + res.message, true);
        return;
      }
      status(actionStatus, b.dataset.done || "done", false);
      setTimeout(() => location.reload(), 800);
    });
  }

  // Live pages draw themselves again, unless the reader is in the middle
  // of something.
  const refresh = document.querySelector('meta[name="refresh-seconds"]');
  if (refresh) {
    const secs = Math.max(2, parseInt(refresh.content, 10) || 10);
    setInterval(() => {
      const busy = (dialog && dialog.open) || (document.activeElement && /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName));
      if (!busy && document.visibilityState === "visible") location.reload();
    }, secs * 1000);
  }
})();
