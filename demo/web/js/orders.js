// The shop page: the orders_by_status view for each status (three lanes) and the orders view
// for one customer, each kept current by the client. The page never writes: the table changes
// through SQL (the demo's writer, or anyone's psql), and the views follow.

import { createClient } from 'liveviews-client';

import { h, renderList, testid } from './dom.js';
import { tokenSource } from './session.js';

const STATUSES = ['open', 'paid', 'shipped'];
const SEED_CUSTOMERS = ['ada', 'grace', 'alan', 'edsger', 'barbara'];
const VIEWER = 'shop_viewer';
const BADGE = {
  connected: (t) => `Live · ${t === 'ws' ? 'WebSocket' : 'SSE'}`,
  connecting: () => 'Reconnecting…',
  disconnected: () => 'Not connected',
  closed: () => 'Closed',
};

/** Orders newest first: the highest id is the order placed last. */
const byId = (rows) => [...rows.values()].sort((a, b) => b.id - a.id);

function orderItem(order) {
  return h('li', { class: 'order', 'data-testid': 'order' },
    h('span', { class: 'id', text: `#${order.id}` }),
    h('span', { 'data-role': 'label' }),
    h('span', { class: 'total', 'data-role': 'total' }));
}

/** Fill an order's element, labelled with its customer or its status; one whose row changed
 * flashes once. */
function showOrder(el, order, label) {
  const fingerprint = `${order.customer}|${order.status}|${order.total}`;
  if (el.dataset.fingerprint && el.dataset.fingerprint !== fingerprint) {
    el.classList.remove('changed');
    void el.offsetWidth; // restart the animation
    el.classList.add('changed');
  }
  Object.assign(el.dataset, { fingerprint, id: String(order.id), status: order.status, customer: order.customer, total: order.total });
  const text = el.querySelector('[data-role="label"]');
  text.textContent = order[label];
  text.className = label === 'status' ? 'status' : '';
  el.querySelector('[data-role="total"]').textContent = `$${order.total}`;
}

class Shop {
  constructor() {
    this.client = createClient({ url: location.origin, getToken: tokenSource(VIEWER), transport: 'auto' });
    this.customers = new Set(SEED_CUSTOMERS);
    this.customer = new URLSearchParams(location.search).get('customer') || SEED_CUSTOMERS[0];
    this.mine = null;
  }

  start() {
    this.client.on('state', () => this.showConnection());
    this.showConnection();
    this.lanes = STATUSES.map((status) => {
      const lane = testid(`lane-${status}`);
      const sub = this.client.subscribe('orders_by_status', status, {
        snapshot: () => this.showLane(lane, sub),
        change: () => this.showLane(lane, sub),
      });
      return sub;
    });
    this.choose(this.customer);
    window.shop = this; // for the curious, in the browser console
  }

  showConnection() {
    const badge = testid('connection-state');
    badge.dataset.state = this.client.state;
    badge.dataset.transport = this.client.transport;
    badge.querySelector('.label').textContent = (BADGE[this.client.state] ?? (() => this.client.state))(this.client.transport);
  }

  showLane(lane, sub) {
    const orders = byId(sub.rows);
    renderList(lane.querySelector('[data-role="list"]'), orders, (o) => String(o.id), orderItem, (el, o) => showOrder(el, o, 'customer'));
    lane.querySelector('[data-role="count"]').textContent = `${orders.length} order${orders.length === 1 ? '' : 's'}`;
    const before = this.customers.size;
    for (const o of orders) this.customers.add(o.customer);
    if (this.customers.size !== before) this.showCustomers();
  }

  choose(customer) {
    this.mine?.unsubscribe();
    this.customer = customer;
    const url = new URL(location.href);
    url.searchParams.set('customer', customer);
    history.replaceState(null, '', url);
    this.mine = this.client.subscribe('orders', customer, {
      snapshot: () => this.showCustomer(),
      change: () => this.showCustomer(),
    });
    this.showCustomers();
    this.showCustomer();
  }

  showCustomers() {
    this.customers.add(this.customer);
    const chips = [...this.customers].sort().map((c) => h('button', {
      type: 'button', class: 'chip', 'data-testid': `customer-${c}`, 'aria-pressed': String(c === this.customer), onclick: () => this.choose(c),
    }, c));
    testid('customers').replaceChildren(...chips);
  }

  showCustomer() {
    const orders = this.mine ? byId(this.mine.rows) : [];
    renderList(testid('customer-orders'), orders, (o) => String(o.id), orderItem, (el, o) => showOrder(el, o, 'status'));
    testid('customer-empty').hidden = orders.length > 0;
    const sum = orders.reduce((n, o) => n + Number(o.total), 0);
    testid('customer-summary').textContent = `${this.customer}: ${orders.length} order${orders.length === 1 ? '' : 's'}, $${sum.toFixed(2)}`;
  }
}

new Shop().start();
