"""The GraphQL schema subset the simulator serves (GitHub's names and nullability)."""

SDL = """
scalar DateTime
scalar URI
scalar GitObjectID
# A 64-bit integer: GitHub sends it as a string.
scalar BigInt

interface Actor {
  login: String!
  avatarUrl: URI!
  url: URI!
}

type User implements Actor {
  id: ID!
  databaseId: Int
  login: String!
  avatarUrl: URI!
  url: URI!
}

type Bot implements Actor {
  id: ID!
  databaseId: Int
  login: String!
  avatarUrl: URI!
  url: URI!
}

type PageInfo {
  hasNextPage: Boolean!
  hasPreviousPage: Boolean!
  startCursor: String
  endCursor: String
}

type RateLimit {
  cost: Int!
  limit: Int!
  nodeCount: Int!
  remaining: Int!
  resetAt: DateTime!
  used: Int!
}

interface GitObject {
  oid: GitObjectID!
}

type Commit implements GitObject {
  oid: GitObjectID!
  statusCheckRollup: StatusCheckRollup
}

enum CheckStatusState { COMPLETED IN_PROGRESS PENDING QUEUED REQUESTED WAITING }
enum CheckConclusionState {
  ACTION_REQUIRED CANCELLED FAILURE NEUTRAL SKIPPED STALE STARTUP_FAILURE SUCCESS TIMED_OUT
}
enum StatusState { ERROR EXPECTED FAILURE PENDING SUCCESS }

type App {
  id: ID!
  slug: String!
  name: String!
}

type CheckSuite {
  app: App
}

type CheckRun {
  id: ID!
  databaseId: Int
  name: String!
  status: CheckStatusState!
  conclusion: CheckConclusionState
  detailsUrl: URI
  checkSuite: CheckSuite!
  isRequired(pullRequestId: ID, pullRequestNumber: Int): Boolean!
}

type StatusContext {
  id: ID!
  context: String!
  state: StatusState!
  description: String
  targetUrl: URI
  isRequired(pullRequestId: ID, pullRequestNumber: Int): Boolean!
}

union StatusCheckRollupContext = CheckRun | StatusContext

type StatusCheckRollupContextConnection {
  totalCount: Int!
  pageInfo: PageInfo!
  nodes: [StatusCheckRollupContext]
}

type StatusCheckRollup {
  state: StatusState!
  contexts(first: Int, after: String, last: Int, before: String): StatusCheckRollupContextConnection!
}

type PullRequestReview {
  id: ID!
  databaseId: Int
  state: String!
  body: String!
  author: Actor
  submittedAt: DateTime
  commit: Commit
}

type PullRequestReviewComment {
  id: ID!
  databaseId: Int @deprecated(reason: "Use `fullDatabaseId` instead.")
  fullDatabaseId: BigInt
  body: String!
  bodyText: String!
  author: Actor
  createdAt: DateTime!
  updatedAt: DateTime!
  url: URI!
  path: String!
  line: Int
  originalLine: Int
  outdated: Boolean!
  commit: Commit
  originalCommit: Commit
  replyTo: PullRequestReviewComment
  pullRequestReview: PullRequestReview
}

type PullRequestReviewCommentEdge {
  cursor: String!
  node: PullRequestReviewComment
}

type PullRequestReviewCommentConnection {
  totalCount: Int!
  pageInfo: PageInfo!
  nodes: [PullRequestReviewComment]
  edges: [PullRequestReviewCommentEdge]
}

type PullRequestReviewThread {
  id: ID!
  isResolved: Boolean!
  isOutdated: Boolean!
  isCollapsed: Boolean!
  path: String!
  line: Int
  originalLine: Int
  startLine: Int
  diffSide: String!
  resolvedBy: User
  viewerCanResolve: Boolean!
  viewerCanUnresolve: Boolean!
  comments(first: Int, after: String, last: Int, before: String): PullRequestReviewCommentConnection!
}

type PullRequestReviewThreadEdge {
  cursor: String!
  node: PullRequestReviewThread
}

type PullRequestReviewThreadConnection {
  totalCount: Int!
  pageInfo: PageInfo!
  nodes: [PullRequestReviewThread]
  edges: [PullRequestReviewThreadEdge]
}

type PullRequestReviewConnection {
  totalCount: Int!
  pageInfo: PageInfo!
  nodes: [PullRequestReview]
}

type PullRequest {
  id: ID!
  databaseId: Int
  number: Int!
  title: String!
  body: String!
  url: URI!
  state: String!
  isDraft: Boolean!
  merged: Boolean!
  mergeable: String!
  headRefName: String!
  headRefOid: GitObjectID!
  baseRefName: String!
  baseRefOid: GitObjectID!
  baseRef: Ref
  author: Actor
  reviewThreads(first: Int, after: String, last: Int, before: String): PullRequestReviewThreadConnection!
  reviews(first: Int, after: String, last: Int, before: String): PullRequestReviewConnection
  isMergeQueueEnabled: Boolean!
  isInMergeQueue: Boolean!
  mergeQueueEntry: MergeQueueEntry
  reviewDecision: PullRequestReviewDecision
}

enum PullRequestReviewDecision {
  APPROVED
  CHANGES_REQUESTED
  REVIEW_REQUIRED
}

type Ref {
  name: String!
  refUpdateRule: RefUpdateRule
}

type RefUpdateRule {
  pattern: String!
  requiredStatusCheckContexts: [String]
  requiredApprovingReviewCount: Int
  requiresCodeOwnerReviews: Boolean!
}

enum MergeQueueEntryState { AWAITING_CHECKS LOCKED MERGEABLE QUEUED UNMERGEABLE }

type MergeQueueEntry {
  id: ID!
  state: MergeQueueEntryState!
  position: Int!
  enqueuedAt: DateTime!
  enqueuer: Actor!
  headCommit: Commit
  baseCommit: Commit
  pullRequest: PullRequest
}

type Repository {
  id: ID!
  databaseId: Int
  name: String!
  nameWithOwner: String!
  url: URI!
  owner: Actor!
  pullRequest(number: Int!): PullRequest
  object(oid: GitObjectID, expression: String): GitObject
}

type Query {
  repository(owner: String!, name: String!, followRenames: Boolean): Repository
  rateLimit(dryRun: Boolean): RateLimit
  viewer: User!
}

input ResolveReviewThreadInput {
  threadId: ID!
  clientMutationId: String
}

input UnresolveReviewThreadInput {
  threadId: ID!
  clientMutationId: String
}

input AddPullRequestReviewThreadReplyInput {
  pullRequestReviewThreadId: ID!
  body: String!
  clientMutationId: String
}

type ResolveReviewThreadPayload {
  clientMutationId: String
  thread: PullRequestReviewThread
}

type UnresolveReviewThreadPayload {
  clientMutationId: String
  thread: PullRequestReviewThread
}

type AddPullRequestReviewThreadReplyPayload {
  clientMutationId: String
  comment: PullRequestReviewComment
}

input EnqueuePullRequestInput {
  pullRequestId: ID!
  expectedHeadOid: GitObjectID
  jump: Boolean
  clientMutationId: String
}

type EnqueuePullRequestPayload {
  clientMutationId: String
  mergeQueueEntry: MergeQueueEntry
}

type Mutation {
  resolveReviewThread(input: ResolveReviewThreadInput!): ResolveReviewThreadPayload
  unresolveReviewThread(input: UnresolveReviewThreadInput!): UnresolveReviewThreadPayload
  addPullRequestReviewThreadReply(input: AddPullRequestReviewThreadReplyInput!): AddPullRequestReviewThreadReplyPayload
  enqueuePullRequest(input: EnqueuePullRequestInput!): EnqueuePullRequestPayload
}
"""
