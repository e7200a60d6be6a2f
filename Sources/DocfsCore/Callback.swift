import Synchronization

/// A callback one part of docfs sets and any thread calls (a sink for failures, a handler of
/// committed sessions). The closure is kept in an object: a closure kept as a `Mutex`'s value
/// itself comes out of `withLock` through its inout value wrapped in reabstraction thunks and
/// goes back in wrapped again, so every call made it deeper — a daemon's session handler was
/// thousands of thunks deep after a stress run, each call walking all of them.
///
/// Lock order: `box` is a leaf lock, never held while the callback runs.
public final class Callback<Argument>: Sendable {
    private final class Box: Sendable {
        let call: @Sendable (Argument) -> Void
        init(_ call: @escaping @Sendable (Argument) -> Void) { self.call = call }
    }

    private let box = Mutex<Box?>(nil)

    public init() {}

    /// Sets (or replaces) the callback.
    public func set(_ call: @escaping @Sendable (Argument) -> Void) {
        let made = Box(call)
        box.withLock { $0 = made }
    }

    /// Calls the callback, if one is set.
    public func callAsFunction(_ argument: Argument) {
        box.withLock { $0 }?.call(argument)
    }
}

/// A callback that may fail: the failure is the caller's (a step that must happen before the
/// caller goes on, set by a layer above it).
public final class ThrowingCallback<Argument>: Sendable {
    private final class Box: Sendable {
        let call: @Sendable (Argument) throws(DocfsError) -> Void
        init(_ call: @escaping @Sendable (Argument) throws(DocfsError) -> Void) { self.call = call }
    }

    private let box = Mutex<Box?>(nil)

    public init() {}

    /// Sets (or replaces) the callback.
    public func set(_ call: @escaping @Sendable (Argument) throws(DocfsError) -> Void) {
        let made = Box(call)
        box.withLock { $0 = made }
    }

    /// Calls the callback, if one is set.
    public func callAsFunction(_ argument: Argument) throws(DocfsError) {
        try box.withLock { $0 }?.call(argument)
    }
}
