// ctxd dashboard: fetches the server-rendered fragments (with the viewer's key as a header
// when the listener is beyond loopback), polls the sessions list every second, and opens raw
// content and history search on the session page. No framework, no build step.
'use strict';

(function () {
  const body = document.body;
  const open = body.dataset.open === 'true';
  const content = document.getElementById('content');
  const KEY = 'ctxd.key';
  const ADMIN = 'ctxd.admin';
  const CTXD_KEY = 'ctxd.tenant-key';

  class Halt extends Error {}

  function credentials() {
    const admin = sessionStorage.getItem(ADMIN);
    const key = sessionStorage.getItem(KEY);
    const tenantKey = sessionStorage.getItem(CTXD_KEY);
    if (admin) return { 'x-ctxd-admin-token': admin };
    if (tenantKey) return { 'x-ctxd-key': tenantKey };
    if (key) return { 'x-api-key': key };
    return {};
  }

  function haveCredentials() {
    return Object.keys(credentials()).length > 0;
  }

  async function errorText(r) {
    try {
      const j = await r.json();
      return j.error || r.statusText;
    } catch (_) {
      return r.statusText;
    }
  }

  async function get(url) {
    const r = await fetch(url, { headers: credentials(), cache: 'no-store' });
    if (r.status === 401 || r.status === 403) {
      showLogin(await errorText(r));
      throw new Halt();
    }
    if (!r.ok) throw new Error(await errorText(r));
    return r;
  }

  function showLogin(message) {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ADMIN);
    document.getElementById('main').hidden = true;
    document.getElementById('login').hidden = false;
    const err = document.getElementById('login-error');
    err.hidden = !message;
    err.textContent = message || '';
  }

  function showWho() {
    const who = document.getElementById('who');
    const forget = document.getElementById('forget');
    if (sessionStorage.getItem(ADMIN)) who.textContent = 'operator: every tenant';
    else if (sessionStorage.getItem(KEY)) who.textContent = 'your sessions (by your API key)';
    else who.textContent = open ? 'loopback: every session' : '';
    forget.hidden = !haveCredentials();
  }

  function fail(e) {
    if (e instanceof Halt) return;
    const p = document.createElement('p');
    p.className = 'error';
    p.textContent = 'ctxd: ' + e.message;
    content.replaceChildren(p);
  }

  // ---- The sessions page ----
  function sessionsPage() {
    const params = new URLSearchParams(location.search);
    const state = {
      sort: params.get('sort') || 'last_active',
      dir: params.get('dir') || 'desc',
      q: params.get('q') || '',
    };
    const filter = document.getElementById('filter');
    const live = document.getElementById('live');
    document.getElementById('toolbar').hidden = false;
    filter.value = state.q;
    let last = '';
    let busy = false;

    async function refresh() {
      if (busy) return;
      busy = true;
      const q = new URLSearchParams(state);
      try {
        const html = await (await get('/ui/frag/sessions?' + q)).text();
        if (html !== last) {
          content.innerHTML = html;
          last = html;
        }
        live.classList.remove('stale');
        live.textContent = 'live · ' + new Date().toLocaleTimeString();
      } catch (e) {
        if (e instanceof Halt) return stop();
        live.classList.add('stale');
        live.textContent = 'stale: ' + e.message;
      } finally {
        busy = false;
      }
    }

    function remember() {
      const q = new URLSearchParams(state);
      history.replaceState(null, '', '/ui/?' + q);
    }

    content.addEventListener('click', (ev) => {
      const th = ev.target.closest('th[data-sort]');
      if (!th) return;
      const key = th.dataset.sort;
      state.dir = state.sort === key && state.dir === 'desc' ? 'asc' : 'desc';
      state.sort = key;
      remember();
      refresh();
    });
    let timer = 0;
    filter.addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        state.q = filter.value;
        remember();
        refresh();
      }, 200);
    });
    const poll = setInterval(refresh, 1000);
    function stop() {
      clearInterval(poll);
    }
    refresh();
  }

  // ---- One session's page ----
  function sessionPage() {
    const id = location.pathname.split('/').filter(Boolean).pop();
    const dialog = document.getElementById('raw-dialog');
    document.getElementById('raw-close').addEventListener('click', () => dialog.close());
    // The parts a refresh replaces; search results and opened notes stay as they are.
    const LIVE = ['session-title', 'summary-cards', 'chart-section', 'composition-section',
      'savings-section', 'pruned-section', 'built'];
    let first = true;
    let last = '';

    async function load() {
      try {
        const html = await (await get('/ui/frag/session/' + encodeURIComponent(id))).text();
        if (html === last) return;
        last = html;
        if (first) {
          content.innerHTML = html;
          first = false;
          return;
        }
        const doc = new DOMParser().parseFromString(html, 'text/html');
        for (const part of LIVE) {
          const now = document.getElementById(part);
          const next = doc.getElementById(part);
          if (now && next) now.replaceWith(next);
        }
      } catch (e) {
        if (first) fail(e);
      }
    }

    async function raw(entry) {
      const title = document.getElementById('raw-title');
      const text = document.getElementById('raw-text');
      title.textContent = 'recall ' + entry;
      text.textContent = 'Loading…';
      if (!dialog.open) dialog.showModal();
      try {
        const r = await get('/ui/api/session/' + encodeURIComponent(id) + '/recall?entry=' +
          encodeURIComponent(entry));
        text.textContent = (await r.json()).text;
      } catch (e) {
        text.textContent = e instanceof Halt ? '' : 'ctxd: ' + e.message;
      }
    }

    content.addEventListener('click', (ev) => {
      const b = ev.target.closest('button.raw');
      if (b) raw(b.dataset.entry);
    });
    content.addEventListener('submit', async (ev) => {
      if (ev.target.id !== 'search') return;
      ev.preventDefault();
      const q = new FormData(ev.target).get('q');
      const hits = document.getElementById('hits');
      hits.textContent = 'Searching…';
      try {
        const r = await get('/ui/frag/session/' + encodeURIComponent(id) + '/search?q=' +
          encodeURIComponent(q));
        hits.innerHTML = await r.text();
      } catch (e) {
        hits.textContent = e instanceof Halt ? '' : 'ctxd: ' + e.message;
      }
    });
    load();
    setInterval(() => {
      if (!dialog.open) load();
    }, 5000);
  }

  // ---- The usage page: per day, filtered by project and agent (the query string keeps
  // the filter, so a link or a reload shows the same) ----
  function usagePage() {
    document.getElementById('toolbar').hidden = true;
    async function load() {
      const query = location.search || '';
      try {
        const r = await get('/ui/frag/usage' + query);
        content.innerHTML = await r.text();
      } catch (e) {
        fail(e);
        return;
      }
      const form = document.getElementById('usage-filter');
      if (!form) return;
      form.addEventListener('change', () => {
        const params = new URLSearchParams();
        for (const name of ['project', 'agent']) {
          const v = form.elements[name].value;
          if (v) params.set(name, v);
        }
        const q = params.toString();
        history.replaceState(null, '', location.pathname + (q ? '?' + q : ''));
        load();
      });
    }
    load();
  }

  function start() {
    showWho();
    if (!open && !haveCredentials()) {
      showLogin('');
      return;
    }
    document.getElementById('main').hidden = false;
    document.getElementById('login').hidden = true;
    if (body.dataset.page === 'session') sessionPage();
    else if (body.dataset.page === 'usage') usagePage();
    else sessionsPage();
  }

  document.getElementById('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = document.getElementById('login-key').value.trim();
    const admin = document.getElementById('login-admin').value.trim();
    const tenantKey = document.getElementById('login-ctxd-key').value.trim();
    if (!key && !admin && !tenantKey) return;
    if (admin) sessionStorage.setItem(ADMIN, admin);
    else if (tenantKey) sessionStorage.setItem(CTXD_KEY, tenantKey);
    else sessionStorage.setItem(KEY, key);
    location.reload();
  });
  document.getElementById('forget').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ADMIN);
    sessionStorage.removeItem(CTXD_KEY);
    location.reload();
  });
  start();
})();
